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
import json
import os
import pickle
import platform
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import REPO, peak_rss_mb  # noqa: E402


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
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank, both sides")
    p.add_argument("--limit-train-samples", type=int, default=10000)
    p.add_argument("--limit-test-samples", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--loaders", default="dataloader,resident")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--device", default="cpu", help="cpu or cuda (one GPU per rank)")
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

    common = ["--data", root, "--epochs", str(a.epochs), "--batch-size", str(a.batch_size),
              "--limit-train-samples", str(a.limit_train_samples),
              "--limit-test-samples", str(a.limit_test_samples), "--threads", str(a.threads)]
    train = os.path.join(a.build, "bin", "train")
    trainctl = os.path.join(a.build, "bin", "trainctl")
    cpp = [train, "--model", "cifar10", "--device", a.device, "--log-interval", "1000000"] + common
    py = [sys.executable, os.path.join(REPO, "scripts", "bench", "reference_cifar.py"), "--device", a.device] + common
    if a.world > 1:
        cpp = [trainctl, "local", "--nproc", str(a.world), "--no-prefix", "--"] + cpp
        py = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={a.world}"] + py[1:]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))

    runs = [("libtrain train (C++)", cpp)] + [(f"python reference, {l} loader", py + ["--loader", l])
                                              for l in a.loaders.split(",")]
    results = {}
    for _ in range(a.repeat):
        for name, cmd in runs:
            done, wall, rss = peak_rss_mb(cmd, env)
            best = results.get(name)
            if best is None or done["images_per_sec"] > best["images_per_sec"]:
                results[name] = dict(images_per_sec=done["images_per_sec"], peak_rss_mb=rss, wall_s=wall,
                                     test_accuracy=done["test_accuracy"], steps=done["steps"])

    ours = results["libtrain train (C++)"]
    gpu = ""
    if a.device == "cuda":
        import torch
        gpu = f", GPU {torch.cuda.get_device_name(0)}"
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpu}; "
          f"CIFAR-10-shaped generated data (cifar-10-batches-py); world {a.world}, {a.threads} thread(s)/rank, "
          f"{a.limit_train_samples} samples x {a.epochs} epoch(s), batch {a.batch_size}/rank, SGD lr 0.1, best of {a.repeat}")
    print(f"{'run':36} {'images/s':>10} {'peak RSS MB':>12} {'test acc':>9} {'speed ratio':>12} {'RSS ratio':>10}")
    for name, r in results.items():
        print(f"{name:36} {r['images_per_sec']:10.1f} {r['peak_rss_mb']:12.0f} {r['test_accuracy']:9.4f} "
              f"{ours['images_per_sec'] / r['images_per_sec']:11.2f}x {ours['peak_rss_mb'] / r['peak_rss_mb']:9.2f}x")
    print("speed ratio = libtrain images/s / that run's; RSS ratio = libtrain peak RSS / that run's")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(args=vars(a), results=results), f, indent=1)
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
