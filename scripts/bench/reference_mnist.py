"""Python reference for libtrain's benchmarks: the MNIST CNN of PyTorch's examples, Adadelta and StepLR in
PyTorch, on the same IDX files, batch, seed and threads as `train`. Not part of libtrain.

Loaders:
  --loader dataloader     the PyTorch examples' way: a map-style Dataset decoding one sample at a time
                     (ToTensor + Normalize), a DataLoader with 0 workers, batch 64;
  --loader resident  the whole split as one normalized tensor, batches by index_select
                     (what libtrain does), the strongest plain-Python baseline.
With WORLD_SIZE > 1 (torchrun) it trains under DistributedDataParallel over Gloo with a
DistributedSampler, as PyTorch's DDP examples do. Prints one JSON 'done' line like `train`.
"""
import argparse
import gzip
import hashlib
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Net(nn.Module):
    def __init__(self, dropout=True):
        super().__init__()
        self.use_dropout = dropout
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        if self.use_dropout:
            x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        if self.use_dropout:
            x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, rows, cols)
    return np.frombuffer(data, dtype=np.uint8, offset=8)


def find(d, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    raise SystemExit(f"{stem}: not found in {d}")


class SeedsDataset(Dataset):
    """Decodes one sample per __getitem__, as torchvision's MNIST + ToTensor + Normalize do."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i].astype(np.float32) / 255.0).unsqueeze(0)
        return (x - 0.1307) / 0.3081, int(self.labels[i])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit-train-samples", type=int, default=0)
    p.add_argument("--limit-test-samples", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--loader", choices=["dataloader", "resident"], default="dataloader")
    p.add_argument("--no-dropout", action="store_true")
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda: one GPU per rank, NCCL)")
    p.add_argument("--eval-every-epoch", action="store_true",
                   help="evaluate after every epoch and print an epoch JSON line (for time to accuracy)")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(f"cuda:{local_rank}" if a.device == "cuda" else "cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world)

    def load(prefix, limit):
        x = read_idx(find(a.data, f"{prefix}-images-idx3-ubyte"))
        y = read_idx(find(a.data, f"{prefix}-labels-idx1-ubyte"))
        if limit:
            x, y = x[:limit], y[:limit]
        return x, y

    xtr, ytr = load("train", a.limit_train_samples)
    xte, yte = load("t10k", a.limit_test_samples)
    torch.manual_seed(a.seed)
    model = Net(dropout=not a.no_dropout).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.Adadelta(model.parameters(), lr=a.lr)
    sched = StepLR(opt, step_size=1, gamma=a.gamma)

    if a.loader == "resident":
        tx = ((torch.from_numpy(xtr.astype(np.float32)) / 255.0 - 0.1307) / 0.3081).unsqueeze(1)
        ty = torch.from_numpy(ytr.astype(np.int64))
        tx, ty = tx.to(dev), ty.to(dev)
    else:
        train_ds = SeedsDataset(xtr, ytr)
    sampler = DistributedSampler(range(len(ytr)), num_replicas=world, rank=rank, seed=a.seed)

    xte_dev = ((torch.from_numpy(xte.astype(np.float32)) / 255.0 - 0.1307) / 0.3081).unsqueeze(1).to(dev)
    yte_dev = torch.from_numpy(yte.astype(np.int64)).to(dev)

    def evaluate():
        model.eval()
        with torch.no_grad():
            out = torch.cat([model(c) for c in xte_dev.split(a.test_batch_size)])
            test_loss = F.nll_loss(out, yte_dev, reduction="sum").item() / len(yte_dev)
            acc = out.argmax(1).eq(yte_dev).float().mean().item()
        return test_loss, acc

    steps, images, train_time, epoch_ips = 0, 0, 0.0, []
    for epoch in range(1, a.epochs + 1):
        sampler.set_epoch(epoch - 1)
        ddp.train()
        t0 = time.perf_counter()
        if a.loader == "resident":
            idx = torch.tensor(list(sampler), dtype=torch.long, device=dev)
            batches = ((tx.index_select(0, i), ty.index_select(0, i)) for i in idx.split(a.batch_size))
        else:
            sampler_e = DistributedSampler(train_ds, num_replicas=world, rank=rank, seed=a.seed)
            sampler_e.set_epoch(epoch - 1)
            batches = DataLoader(train_ds, batch_size=a.batch_size, sampler=sampler_e, num_workers=0)
        loss_sum, n_steps = 0.0, 0
        for x, y in batches:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            opt.zero_grad()
            loss = F.nll_loss(ddp(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
            n_steps += 1
            images += len(y) * world
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_time += time.perf_counter() - t0
        epoch_time = time.perf_counter() - t0
        epoch_ips.append(n_steps and (len(ytr) if a.loader == "resident" else len(train_ds)) / epoch_time)
        loss_sum = float(loss_sum)
        steps += n_steps
        sched.step()
        if a.eval_every_epoch and epoch < a.epochs:
            test_loss, acc = evaluate()
            if rank == 0:
                print(json.dumps({"event": "epoch", "epoch": epoch, "test_accuracy": acc, "time": time.time(),
                                  "epoch_images_per_sec": epoch_ips[-1]}), flush=True)
            model.train()

    test_loss, acc = evaluate()
    if a.eval_every_epoch and rank == 0:
        print(json.dumps({"event": "epoch", "epoch": a.epochs, "test_accuracy": acc, "time": time.time(),
                          "epoch_images_per_sec": epoch_ips[-1]}), flush=True)
    h = hashlib.sha256()
    for t in model.parameters():
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    if rank == 0:
        print(json.dumps({"event": "done", "epochs": a.epochs, "steps": steps,
                          "train_loss": loss_sum / max(1, n_steps), "test_loss": test_loss,
                          "test_accuracy": acc, "images_per_sec": images / train_time,
                          "images_per_sec_best": max(epoch_ips) if epoch_ips else 0.0,
                          "peak_gpu_mb": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else 0.0,
                          "world_size": world, "params_sha256": h.hexdigest(),
                          "loader": a.loader}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
