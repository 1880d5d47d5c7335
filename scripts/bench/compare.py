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
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def peak_rss_mb(cmd, env=None):
    """Runs cmd and returns (done, wall, peak RSS of its largest process in MB)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, env=env)
        # communicate() would reap the child itself; read stdout, then wait4 for the rusage.
        out = proc.stdout.read()
        _, status, rusage = os.wait4(proc.pid, 0)
        errf.seek(0)
        err = errf.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(err.decode(errors="replace")[-4000:])
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}")
    lines = [l for l in out.decode().splitlines() if l.strip()]
    done = json.loads(lines[-1].split("] ", 1)[-1] if lines[-1].startswith("[r") else lines[-1])
    return done, wall, rusage.ru_maxrss / 1024.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank, both sides")
    p.add_argument("--limit-train-samples", type=int, default=10000)
    p.add_argument("--limit-test-samples", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--loaders", default="dataloader,resident")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--device", default="cpu", help="cpu or cuda (one GPU per rank)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--cpp-variant", action="append", default=[], metavar="NAME=ARGS",
                   help="an extra libtrain run with these extra flags")
    p.add_argument("--python-tuned-malloc", action="store_true",
                   help="an extra Python resident run with MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_ "
                        "as libtrain's --heap reuse sets them")
    a = p.parse_args()

    common = ["--data", a.data, "--epochs", str(a.epochs), "--batch-size", str(a.batch_size),
              "--limit-train-samples", str(a.limit_train_samples),
              "--limit-test-samples", str(a.limit_test_samples), "--threads", str(a.threads)]
    train = os.path.join(a.build, "bin", "train")
    trainctl = os.path.join(a.build, "bin", "trainctl")
    cpp = [train, "--model", "mnist", "--dataset", "fashion-mnist", "--device", a.device,
           "--log-interval", "1000000"] + common
    py = [sys.executable, os.path.join(REPO, "scripts", "bench", "reference_mnist.py"), "--device", a.device] + common
    if a.world > 1:
        cpp = [trainctl, "local", "--nproc", str(a.world), "--no-prefix", "--"] + cpp
        py = [sys.executable, "-m", "torch.distributed.run", "--standalone",
              f"--nproc_per_node={a.world}"] + py[1:]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))

    runs = [("libtrain train (C++)", cpp, env)]
    for v in a.cpp_variant:
        name, _, extra = v.partition("=")
        runs.append((f"libtrain, {name}", cpp + extra.split(), env))
    for loader in a.loaders.split(","):
        runs.append((f"python reference, {loader} loader", py + ["--loader", loader], env))
    if a.python_tuned_malloc:
        tuned = dict(env, MALLOC_MMAP_THRESHOLD_=str(32 << 20), MALLOC_TRIM_THRESHOLD_=str(1 << 30))
        runs.append(("python resident, tuned malloc", py + ["--loader", "resident"], tuned))
    results = {}
    for _ in range(a.repeat):
        for name, cmd, run_env in runs:
            done, wall, rss = peak_rss_mb(cmd, run_env)
            best = results.get(name)
            if best is None or done["images_per_sec"] > best["images_per_sec"]:
                results[name] = dict(images_per_sec=done["images_per_sec"], peak_rss_mb=rss, wall_s=wall,
                                     test_accuracy=done["test_accuracy"], steps=done["steps"])
            else:
                best["peak_rss_mb"] = max(best["peak_rss_mb"], rss)

    ours = results["libtrain train (C++)"]
    gpu = ""
    if a.device == "cuda":
        import torch
        gpu = f", GPU {torch.cuda.get_device_name(0)}"
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpu}; "
          f"world {a.world}, {a.threads} thread(s)/rank, {a.limit_train_samples} samples x {a.epochs} epoch(s), "
          f"batch {a.batch_size}/rank, best of {a.repeat}")
    print(f"{'run':36} {'images/s':>10} {'peak RSS MB':>12} {'test acc':>9} {'speed ratio':>12} {'RSS ratio':>10}")
    for name, r in results.items():
        print(f"{name:36} {r['images_per_sec']:10.1f} {r['peak_rss_mb']:12.0f} {r['test_accuracy']:9.4f} "
              f"{ours['images_per_sec'] / r['images_per_sec']:11.2f}x {ours['peak_rss_mb'] / r['peak_rss_mb']:9.2f}x")
    print("speed ratio = libtrain images/s / that run's; RSS ratio = libtrain peak RSS / that run's")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(args=vars(a), results=results), f, indent=1)


if __name__ == "__main__":
    main()
