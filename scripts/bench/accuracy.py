"""Test accuracy of libtrain against Python on the benchmark's three workloads: the same models,
recipes, data, epochs and seeds: the claim to check is "within noise of Python's, 3 seeds, same
epochs".

  python3 scripts/bench/accuracy.py --build build-gpu [--seeds 1,2,3] [--workloads mnist,resnet18,transformer]
  python3 scripts/bench/accuracy.py --device cpu --tiny          # the whole chain on a CPU, tiny sizes

For each workload and seed, libtrain's program (`train --model mnist|resnet18`, `transformer_bench`,
one GPU, its default step: the CUDA graph on a GPU) and a plain PyTorch loop in this process
(bench_models.Workload's model, loss, per-step rate and torch.optim's optimizer, the data resident
on the device, shuffled each epoch, the last smaller batch kept) train from the seed and report
the test accuracy. Data: Fashion-MNIST (the real files); CIFAR-10's binary layout written by
make_cifar10.py --learnable (classes a faint square on noise: real CIFAR-10 isn't at hand
offline); the transformer's generated stride sequences (each side draws its own from the same rule).
Prints one JSON row per run and a table: mean and standard deviation per side, the difference and
2 standard errors of it ("noise"); within noise when |difference| <= noise. Not timed.
"""
import argparse
import json
import os
import statistics
import sys
import subprocess
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_models as bm  # noqa: E402
import three_workloads as tw  # noqa: E402
from reference_mnist import find, read_idx  # noqa: E402

# epochs, batch, precision, training samples, test samples
CONFIG = {"mnist": (2, 64, "fp32", 60000, 10000), "resnet18": (6, 128, "bf16", 20000, 2000),
          "transformer": (2, 64, "bf16", 8192, 512)}
TINY = {"mnist": (1, 64, "fp32", 1024, 256), "resnet18": (1, 32, "fp32", 128, 64),
        "transformer": (2, 16, "fp32", 256, 64)}
CIFAR_CONTRAST = 48
EVAL_BATCH = {"mnist": 1000, "resnet18": 500, "transformer": 64}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(tw.REPO, "build-gpu"))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--workloads", default="mnist,resnet18,transformer")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--mnist-data", default="")
    p.add_argument("--cifar-data", default="", help="a CIFAR-10 binary folder (default: make_cifar10.py --learnable)")
    p.add_argument("--results", default=os.path.join(tw.REPO, "logs", "bench", "accuracy.jsonl"))
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--commit", default="")
    p.add_argument("--run-timeout-s", type=float, default=300)
    a = p.parse_args()
    a.workload_list = [w for w in a.workloads.split(",") if w]
    bad = [w for w in a.workload_list if w not in CONFIG]
    if bad:
        p.error(f"--workloads: expected some of {', '.join(CONFIG)}, found {', '.join(bad)}")
    try:
        a.seed_list = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        p.error(f"--seeds: expected a comma list of integers, found '{a.seeds}'")
    a.dims = tw.TINY_TRANSFORMER if a.tiny else tw.TRANSFORMER
    a.python = sys.executable
    a.mnist_data_dir = None
    return a


# ---- data, the same files for both sides ----

def cifar_records(folder, names, limit):
    raw = b"".join(open(os.path.join(folder, n), "rb").read() for n in names)
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3073)[:limit]
    x = torch.from_numpy(rec[:, 1:].astype(np.float32).reshape(-1, 3, 32, 32)) / 255.0
    return (x - 0.5) / 0.5, torch.from_numpy(rec[:, 0].astype(np.int64))


def python_data(a, wl, n_train, n_test, folder):
    """(train x, train y, test x, test y) on the CPU, normalized as libtrain's datasets do."""
    if wl == "mnist":
        def split(img, lab, n):
            x = torch.from_numpy(read_idx(find(folder, img))[:n].astype(np.float32)).unsqueeze(1) / 255.0
            return (x - 0.1307) / 0.3081, torch.from_numpy(read_idx(find(folder, lab))[:n].astype(np.int64))
        return (*split("train-images-idx3-ubyte", "train-labels-idx1-ubyte", n_train),
                *split("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", n_test))
    if wl == "resnet18":
        return (*cifar_records(folder, [f"data_batch_{i}.bin" for i in range(1, 6)], n_train),
                *cifar_records(folder, ["test_batch.bin"], n_test))
    d = a.dims
    return (*bm.stride_sequences(n_train, d["seq_len"], d["vocab"], 1),
            *bm.stride_sequences(n_test, d["seq_len"], d["vocab"], 2))


# ---- the Python side ----

class Args:
    """What bench_models.Workload reads of peers.py's arguments."""

    def __init__(self, dims):
        self.lr = 0.0
        self.layers, self.d_model, self.heads = dims["layers"], dims["d_model"], dims["heads"]
        self.ffn, self.seq_len, self.vocab = dims["ffn"], dims["seq_len"], dims["vocab"]


def accuracy_of(wl, model, x, y, dev, autocast):
    model.eval()
    right = 0.0
    with torch.no_grad(), autocast():
        for xs, ys in zip(x.split(EVAL_BATCH[wl]), y.split(EVAL_BATCH[wl])):
            out = model(xs.to(dev))
            right += out.argmax(-1).eq(ys.to(dev)).float().sum().item()
    return right / y.numel()


def python_run(a, wl, seed, data, dev):
    epochs, batch, precision, _, _ = (TINY if a.tiny else CONFIG)[wl]
    work = bm.Workload(wl, Args(a.dims))
    x, y, tx, ty = data
    x, y = x.to(dev), y.to(dev)
    torch.manual_seed(seed)
    model = work.model().to(dev)
    opt = work.optimizer(model.parameters(), graph=False, dev=dev)
    n = x.shape[0]
    steps_per_epoch = (n + batch - 1) // batch
    total, step = epochs * steps_per_epoch, 0

    def autocast():
        return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch)).to(dev)
        for i in range(steps_per_epoch):
            idx = order[i * batch:(i + 1) * batch]
            for g in opt.param_groups:
                g["lr"] = work.lr_at(step, total, steps_per_epoch)
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = work.loss(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            step += 1
    return {"test_accuracy": accuracy_of(wl, model, tx, ty, dev, autocast), "epochs": epochs, "steps": step,
            "precision": precision, "batch_size": batch}


# ---- libtrain's side ----

def libtrain_run(a, wl, seed, folder):
    epochs, batch, precision, n_train, n_test = (TINY if a.tiny else CONFIG)[wl]
    common = ["--device", a.device, "--epochs", str(epochs), "--batch-size", str(batch), "--precision", precision,
              "--seed", str(seed), "--log-interval", "1000000", "--threads", "1" if a.device == "cpu" else "4"]
    if a.device == "cuda":
        common += ["--tf32", "off"]
    if wl == "transformer":
        cmd = [os.path.join(a.build, "bin", "transformer_bench")] + tw.dims_flags(a.dims) + [
            "--train-sequences", str(n_train), "--eval-sequences", str(n_test)]
    else:
        cmd = [os.path.join(a.build, "bin", "train"), "--model", wl, "--data", folder,
               "--limit-train-samples", str(n_train), "--limit-test-samples", str(n_test)]
    rc, out, err = tw.run_cmd(cmd + common, a.run_timeout_s)
    done = [r for r in tw.json_lines(out) if r.get("event") == "done"]
    if rc != 0 or not done:
        print(f"FAILED ({rc}): {' '.join(cmd + common)}\n{err[-2000:]}", flush=True)
        return {"test_accuracy": None, "error": f"exit {rc}"}
    d = done[-1]
    return {"test_accuracy": d["test_accuracy"], "epochs": d["epochs"], "steps": d["steps"],
            "precision": d.get("precision", precision), "batch_size": batch, "step": tw.step_kind(err)}


# ---- the table ----

def summary(rows):
    lines = ["| workload | epochs x batch, precision | libtrain accuracy (mean +- sd) | Python accuracy (mean +- sd) "
             "| difference | 2 standard errors | verdict |", "|---|---|---|---|---|---|---|"]
    for wl in CONFIG:
        got = {impl: [r["test_accuracy"] for r in rows if r["workload"] == wl and r["impl"] == impl
                      and r.get("test_accuracy") is not None] for impl in ("libtrain", "python")}
        if not got["libtrain"] or not got["python"]:
            continue
        mean = {k: statistics.fmean(v) for k, v in got.items()}
        sd = {k: statistics.stdev(v) if len(v) > 1 else 0.0 for k, v in got.items()}
        noise = 2 * (sd["libtrain"] ** 2 / len(got["libtrain"]) + sd["python"] ** 2 / len(got["python"])) ** 0.5
        diff = mean["libtrain"] - mean["python"]
        r = next(r for r in rows if r["workload"] == wl and r["impl"] == "python")
        verdict = "within noise" if abs(diff) <= noise else "outside noise"
        lines.append(f"| {wl} | {r['epochs']} x {r['batch_size']}, {r['precision']} | "
                     f"{100 * mean['libtrain']:.2f} +- {100 * sd['libtrain']:.2f} ({len(got['libtrain'])} seeds) | "
                     f"{100 * mean['python']:.2f} +- {100 * sd['python']:.2f} ({len(got['python'])} seeds) | "
                     f"{100 * diff:+.2f} | {100 * noise:.2f} | {verdict} |")
    return "\n".join(lines)


def main():
    a = parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    rows = []
    stamp = {"date": time.strftime("%Y-%m-%d"), "commit": a.commit,
             "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        for wl in a.workload_list:
            _, _, _, n_train, n_test = (TINY if a.tiny else CONFIG)[wl]
            folder = None
            if wl == "mnist":
                folder = tw.mnist_dir(a)
            elif wl == "resnet18":
                folder = a.cifar_data or os.path.join(tmp, "cifar10")
                if not a.cifar_data:
                    subprocess.run([a.python, os.path.join(HERE, "make_cifar10.py"), "--out", folder, "--train",
                                       str(n_train), "--test", str(n_test), "--learnable", str(CIFAR_CONTRAST)], check=True)
            data = python_data(a, wl, n_train, n_test, folder)
            for seed in a.seed_list:
                for impl, run in (("libtrain", lambda: libtrain_run(a, wl, seed, folder)),
                                  ("python", lambda: python_run(a, wl, seed, data, dev))):
                    row = dict({"workload": wl, "impl": impl, "seed": seed}, **run(), **stamp)
                    if wl == "resnet18" and not a.cifar_data:
                        row["data"] = f"make_cifar10.py --learnable {CIFAR_CONTRAST}"
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    with open(a.results, "a") as f:
                        f.write(json.dumps(row) + "\n")
    print("\n" + summary(rows))
    return 0 if all(r.get("test_accuracy") is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
