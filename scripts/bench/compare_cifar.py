"""CIFAR-10 benchmark harness: writes CIFAR-10-shaped data (torchvision's cifar-10-batches-py
layout: five pickled training batches and a test batch of 10000 records each, learnable synthetic
classes), then runs libtrain's `train --model cifar10` and the Python reference
(reference_cifar.py: the LeNet of PyTorch's CIFAR-10 tutorial, SGD lr 0.1 momentum 0.9 weight decay 1e-4, batch 256
per rank, DDP when world > 1) on the same files, machine, seed and threads in one invocation, and
prints images/s, peak RSS and the ratios.

usage: .venv/bin/python scripts/bench/compare_cifar.py [--world N] [--threads T] [--device cpu|cuda]
           [--limit-train-samples N] [--epochs E] [--loaders dataloader,resident] [--repeat R] [--work DIR]
World 1 runs the programs directly; world N > 1 runs `trainctl local --nproc N -- train` against
`torchrun --standalone --nproc_per_node N reference_cifar.py`.
"""
import argparse
import os
import pickle
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as bc  # noqa: E402


def write_data(root, seed=1):
    """cifar-10-batches-py with 10 classes told apart by a bright square's place and colour on noise."""
    folder = os.path.join(root, "cifar-10-batches-py")
    if os.path.exists(os.path.join(folder, "test_batch")):
        return
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = rng.integers(0, 10, 10000)
        x = rng.integers(64, 192, (10000, 3, 32, 32), dtype=np.uint8)
        for k in range(10):
            sel = labels == k
            top, left = (k // 4) * 8, (k % 4) * 8
            x[sel, k % 3, top:top + 8, left:left + 8] = 240
        d = {"batch_label": name, "labels": [int(v) for v in labels], "data": x.reshape(10000, 3072),
             "filenames": [f"{name}_{i}.png" for i in range(10000)]}
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump(d, f, protocol=2)


def main():
    p = argparse.ArgumentParser()
    bc.add_harness_args(p, batch_size=256)
    bc.add_harness_run_args(p)
    p.add_argument("--work", help="where the generated data goes (default: a temporary folder)")
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()

    tmp = None
    if a.work:
        root = a.work
    else:
        tmp = tempfile.TemporaryDirectory(prefix="cifar-bench-")
        root = tmp.name
    write_data(root)

    cpp, py, env = bc.commands(a, root, ["--model", "cifar10"], "reference_cifar.py")
    runs = [("libtrain train (C++)", cpp, env)] + [(f"python reference, {l} loader", py + ["--loader", l], env)
                                                   for l in a.loaders.split(",")]
    # The peak RSS of the fastest repeat only (compare.py takes the largest over all repeats).
    results = bc.best_of(runs, a.repeat, rss_of_all_repeats=False)

    print(f"{bc.machine(a.device)}; CIFAR-10-shaped generated data (cifar-10-batches-py); world {a.world}, "
          f"{a.threads} thread(s)/rank, {a.limit_train_samples} samples x {a.epochs} epoch(s), "
          f"batch {a.batch_size}/rank, SGD lr 0.1, best of {a.repeat}")
    bc.print_table(results)
    bc.write_json(a.json, a, results)
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
