"""Benchmark harness: runs libtrain's `train` and the Python reference on the same machine, data,
batch, seed and threads, in one invocation, and prints images/s, peak RSS and the ratios.

usage: .venv/bin/python scripts/bench/compare.py [--world N] [--threads T]
           [--limit-train-samples N] [--epochs E] [--loaders dataloader,resident] [--repeat R]
           [--cpp-variant 'NAME=ARGS' ...] [--python-tuned-malloc]
World 1 runs the programs directly; world N > 1 runs `trainctl local --nproc N -- train` against
`torchrun --standalone --nproc_per_node N reference_mnist.py` (Python DDP over Gloo).
Peak RSS is the largest single process of the run (one rank), from wait4().
--cpp-variant adds libtrain runs with extra flags (ablations, e.g. 'gloo=--shm-allreduce off');
--python-tuned-malloc adds a Python resident run with the glibc thresholds libtrain sets itself.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    bc.add_harness_args(p, batch_size=64)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    bc.add_harness_run_args(p)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--cpp-variant", action="append", default=[], metavar="NAME=ARGS",
                   help="an extra libtrain run with these extra flags")
    p.add_argument("--python-tuned-malloc", action="store_true",
                   help="an extra Python resident run with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ "
                        "as libtrain's --heap reuse sets them")
    a = p.parse_args()

    cpp, py, env = bc.commands(a, a.data, ["--model", "mnist", "--dataset", "fashion-mnist"], "reference_mnist.py")
    runs = [("libtrain train (C++)", cpp, env)]
    for v in a.cpp_variant:
        name, _, extra = v.partition("=")
        runs.append((f"libtrain, {name}", cpp + extra.split(), env))
    for loader in a.loaders.split(","):
        runs.append((f"python reference, {loader} loader", py + ["--loader", loader], env))
    if a.python_tuned_malloc:
        tuned = dict(env, MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(1 << 30))
        runs.append(("python resident, tuned malloc", py + ["--loader", "resident"], tuned))
    results = bc.best_of(runs, a.repeat)

    print(f"{bc.machine(a.device)}; world {a.world}, {a.threads} thread(s)/rank, {a.limit_train_samples} samples "
          f"x {a.epochs} epoch(s), batch {a.batch_size}/rank, best of {a.repeat}")
    bc.print_table(results)
    bc.write_json(a.json, a, results)


if __name__ == "__main__":
    main()
