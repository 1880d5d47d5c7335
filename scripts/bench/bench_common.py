"""What the benchmark scripts share. Not part of libtrain.

For the Python references (reference_mnist.py, reference_cifar.py): their common flags, the
torchrun/DDP set-up, the two loaders (resident tensor or per-sample Dataset + DataLoader, both under
a DistributedSampler), the timed training epoch, evaluation, the parameters' hash and the JSON
'done' line. Each reference keeps its own model, data reading, loss, optimizer and defaults.

For the harnesses (compare.py, compare_cifar.py): their common flags, the `train` and reference
command lines (trainctl local / torchrun for world > 1), running them for peak RSS, best of the
repeats, and the results table.
"""
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- the Python references ----

def add_training_args(p, batch_size, lr):
    """--epochs, --batch-size, --test-batch-size, --lr (the reference's own defaults)."""
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--lr", type=float, default=lr)


def add_run_args(p, device=True):
    """--seed, --limit-train-samples, --limit-test-samples, --threads, --loader and, with device,
    --device (without: the caller adds it with add_device_arg, where its --help wants it)."""
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit-train-samples", type=int, default=0)
    p.add_argument("--limit-test-samples", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--loader", choices=["dataloader", "resident"], default="dataloader")
    if device:
        add_device_arg(p)


def add_device_arg(p):
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda: one GPU per rank, NCCL)")


def init_distributed(a):
    """Threads, this rank's device and, under torchrun (WORLD_SIZE > 1), the process group (Gloo on
    cpu, NCCL on cuda). Returns (world, rank, device)."""
    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(f"cuda:{local_rank}" if a.device == "cuda" else "cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world)
    return world, rank, dev


def wrap_ddp(model, world):
    return nn.parallel.DistributedDataParallel(model) if world > 1 else model


def finish_distributed(world):
    if world > 1:
        dist.destroy_process_group()


def normalized(images, mean, std):
    """uint8 images as one float tensor, (x / 255 - mean) / std."""
    return (torch.from_numpy(images.astype(np.float32)) / 255.0 - mean) / std


def labels_tensor(labels):
    return torch.from_numpy(labels.astype(np.int64))


class SeedsDataset(Dataset):
    """Decodes one sample per __getitem__, as torchvision's datasets + ToTensor + Normalize do;
    add_channel gives a single-channel image its channel dimension (MNIST)."""

    def __init__(self, images, labels, mean, std, add_channel=False):
        self.images, self.labels = images, labels
        self.mean, self.std, self.add_channel = mean, std, add_channel

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i].astype(np.float32) / 255.0)
        if self.add_channel:
            x = x.unsqueeze(0)
        return (x - self.mean) / self.std, int(self.labels[i])


class TrainLoader:
    """The training split, under a DistributedSampler over this rank's share:
      dataloader  a SeedsDataset through a DataLoader with 0 workers (the PyTorch examples' way);
      resident    the whole split as one normalized tensor on the device, batches by index_select."""

    def __init__(self, kind, images, labels, mean, std, add_channel, batch_size, world, rank, seed, dev):
        self.kind, self.batch_size, self.world, self.rank, self.seed = kind, batch_size, world, rank, seed
        self.dev = dev
        if kind == "resident":
            tx = normalized(images, mean, std)
            if add_channel:
                tx = tx.unsqueeze(1)
            self.tx, self.ty = tx.to(dev), labels_tensor(labels).to(dev)
        else:
            self.dataset = SeedsDataset(images, labels, mean, std, add_channel)
        self.size = len(labels)
        self.sampler = DistributedSampler(range(self.size), num_replicas=world, rank=rank, seed=seed)

    def batches(self, epoch):
        """This rank's (x, y) batches of epoch (from 1)."""
        if self.kind == "resident":
            idx = torch.tensor(list(self.sampler), dtype=torch.long, device=self.dev)
            return ((self.tx.index_select(0, i), self.ty.index_select(0, i)) for i in idx.split(self.batch_size))
        sampler_e = DistributedSampler(self.dataset, num_replicas=self.world, rank=self.rank, seed=self.seed)
        sampler_e.set_epoch(epoch - 1)
        return DataLoader(self.dataset, batch_size=self.batch_size, sampler=sampler_e, num_workers=0)


def train_epoch(ddp, opt, loss_fn, loader, epoch, dev, world):
    """One timed epoch. Returns (this rank's loss sum, steps, images over all ranks, seconds)."""
    loader.sampler.set_epoch(epoch - 1)
    ddp.train()
    t0 = time.perf_counter()
    batches = loader.batches(epoch)
    loss_sum, n_steps, images = 0.0, 0, 0
    for x, y in batches:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        loss_sum += loss.detach()
        n_steps += 1
        images += len(y) * world
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return float(loss_sum), n_steps, images, seconds


def evaluate(model, x, y, batch_size, loss_fn):
    """(mean test loss, accuracy) of model on the device tensors x, y, in batches of batch_size."""
    model.eval()
    with torch.no_grad():
        out = torch.cat([model(c) for c in x.split(batch_size)])
        test_loss = loss_fn(out, y, reduction="sum").item() / len(y)
        acc = out.argmax(1).eq(y).float().mean().item()
    return test_loss, acc


def params_sha256(model):
    h = hashlib.sha256()
    for t in model.parameters():
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def print_done(rank, a, steps, train_loss, test_loss, acc, images_per_sec, world, model, **extra):
    """Rank 0 prints the JSON 'done' line, like `train`'s; extra fields go after images_per_sec."""
    sha = params_sha256(model)
    if rank == 0:
        done = {"event": "done", "epochs": a.epochs, "steps": steps, "train_loss": train_loss,
                "test_loss": test_loss, "test_accuracy": acc, "images_per_sec": images_per_sec}
        done.update(extra)
        done.update(world_size=world, params_sha256=sha, loader=a.loader)
        print(json.dumps(done), flush=True)


# ---- the harnesses ----

def add_harness_args(p, batch_size):
    """--world, --threads, --limit-train-samples, --limit-test-samples, --epochs, --batch-size."""
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank, both sides")
    p.add_argument("--limit-train-samples", type=int, default=10000)
    p.add_argument("--limit-test-samples", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=batch_size)


def add_harness_run_args(p):
    """--loaders, --repeat, --build, --device."""
    p.add_argument("--loaders", default="dataloader,resident")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--device", default="cpu", help="cpu or cuda (one GPU per rank)")


def commands(a, data, model_args, reference):
    """(libtrain's command, the Python reference's command, their environment) for the same data,
    epochs, batch, samples and threads; world > 1: `trainctl local` against torchrun."""
    common = ["--data", data, "--epochs", str(a.epochs), "--batch-size", str(a.batch_size),
              "--limit-train-samples", str(a.limit_train_samples),
              "--limit-test-samples", str(a.limit_test_samples), "--threads", str(a.threads)]
    train = os.path.join(a.build, "bin", "train")
    trainctl = os.path.join(a.build, "bin", "trainctl")
    cpp = [train] + model_args + ["--device", a.device, "--log-interval", "1000000"] + common
    py = [sys.executable, os.path.join(REPO, "scripts", "bench", reference), "--device", a.device] + common
    if a.world > 1:
        cpp = [trainctl, "local", "--nproc", str(a.world), "--no-prefix", "--"] + cpp
        py = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={a.world}"] + py[1:]
    return cpp, py, dict(os.environ, OMP_NUM_THREADS=str(a.threads))


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


def best_of(runs, repeat, rss_of_all_repeats=True):
    """Runs each (name, cmd, env) repeat times; per name the fastest run's numbers. The peak RSS is
    the largest over all repeats with rss_of_all_repeats, else the fastest run's."""
    results = {}
    for _ in range(repeat):
        for name, cmd, run_env in runs:
            done, wall, rss = peak_rss_mb(cmd, run_env)
            best = results.get(name)
            if best is None or done["images_per_sec"] > best["images_per_sec"]:
                results[name] = dict(images_per_sec=done["images_per_sec"], peak_rss_mb=rss, wall_s=wall,
                                     test_accuracy=done["test_accuracy"], steps=done["steps"])
            elif rss_of_all_repeats:
                best["peak_rss_mb"] = max(best["peak_rss_mb"], rss)
    return results


def machine(device):
    """'machine: HOST CPU, N cores[, GPU NAME]' for the table's first line."""
    gpu = ""
    if device == "cuda":
        gpu = f", GPU {torch.cuda.get_device_name(0)}"
    return f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpu}"


def print_table(results, ours_name="libtrain train (C++)"):
    """Images/s, peak RSS, test accuracy and libtrain's ratios to each run."""
    ours = results[ours_name]
    print(f"{'run':36} {'images/s':>10} {'peak RSS MB':>12} {'test acc':>9} {'speed ratio':>12} {'RSS ratio':>10}")
    for name, r in results.items():
        print(f"{name:36} {r['images_per_sec']:10.1f} {r['peak_rss_mb']:12.0f} {r['test_accuracy']:9.4f} "
              f"{ours['images_per_sec'] / r['images_per_sec']:11.2f}x {ours['peak_rss_mb'] / r['peak_rss_mb']:9.2f}x")
    print("speed ratio = libtrain images/s / that run's; RSS ratio = libtrain peak RSS / that run's")


def write_json(path, a, results):
    if path:
        with open(path, "w") as f:
            json.dump(dict(args=vars(a), results=results), f, indent=1)
