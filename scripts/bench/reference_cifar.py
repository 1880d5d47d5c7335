"""Python reference for libtrain's CIFAR-10 benchmark: the LeNet of PyTorch's CIFAR-10 tutorial (conv 6/16, fc
120/84/10) with SGD (lr 0.1, momentum 0.9, weight decay 1e-4), batch 256, Normalize(0.5, 0.5, 0.5),
on the same cifar-10-batches-py files, seed and threads as `train --model cifar10`. Not part of
libtrain.

Loaders:
  --loader dataloader     the PyTorch examples' way: a map-style Dataset decoding one sample at a time
                     (torchvision's CIFAR10 + ToTensor + Normalize, without torchvision), a
                     DataLoader with 0 workers;
  --loader resident  the whole split as one normalized tensor, batches by index_select
                     (what libtrain does), the strongest plain-Python baseline.
With WORLD_SIZE > 1 (torchrun) it trains under DistributedDataParallel over Gloo (NCCL on cuda)
with a DistributedSampler. Prints one JSON 'done' line like `train`.
"""
import argparse
import hashlib
import json
import os
import pickle
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def load_split(folder, names, limit):
    """torchvision's CIFAR10: pickle.load(f, encoding='latin1') of each batch, data reshaped to NCHW."""
    xs, ys = [], []
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            d = pickle.load(f, encoding="latin1")
        xs.append(d["data"])
        ys.extend(d["labels"])
        if limit and len(ys) >= limit:
            break
    x = np.vstack(xs).reshape(-1, 3, 32, 32)
    y = np.array(ys, dtype=np.int64)
    if limit:
        x, y = x[:limit], y[:limit]
    return x, y


class SeedsDataset(Dataset):
    """One sample per __getitem__, as torchvision's CIFAR10 + ToTensor + Normalize(0.5, 0.5) do."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i].astype(np.float32) / 255.0)
        return (x - 0.5) / 0.5, int(self.labels[i])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="torchvision root holding cifar-10-batches-py")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--limit-train-samples", type=int, default=0)
    p.add_argument("--limit-test-samples", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--loader", choices=["dataloader", "resident"], default="dataloader")
    p.add_argument("--device", default="cpu", help="cpu or cuda (cuda: one GPU per rank, NCCL)")
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

    folder = os.path.join(a.data, "cifar-10-batches-py")
    xtr, ytr = load_split(folder, [f"data_batch_{i}" for i in range(1, 6)], a.limit_train_samples)
    xte, yte = load_split(folder, ["test_batch"], a.limit_test_samples)
    torch.manual_seed(a.seed)
    model = Net().to(dev)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)

    if a.loader == "resident":
        tx = (torch.from_numpy(xtr.astype(np.float32)) / 255.0 - 0.5) / 0.5
        ty = torch.from_numpy(ytr)
        tx, ty = tx.to(dev), ty.to(dev)
    else:
        train_ds = SeedsDataset(xtr, ytr)
    sampler = DistributedSampler(range(len(ytr)), num_replicas=world, rank=rank, seed=a.seed)

    steps, images, train_time, loss_sum, n_steps = 0, 0, 0.0, 0.0, 0
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
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
            n_steps += 1
            images += len(y) * world
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_time += time.perf_counter() - t0
        loss_sum = float(loss_sum)
        steps += n_steps

    model.eval()
    with torch.no_grad():
        x = ((torch.from_numpy(xte.astype(np.float32)) / 255.0 - 0.5) / 0.5).to(dev)
        y = torch.from_numpy(yte).to(dev)
        out = torch.cat([model(c) for c in x.split(a.test_batch_size)])
        test_loss = F.cross_entropy(out, y, reduction="sum").item() / len(y)
        acc = out.argmax(1).eq(y).float().mean().item()
    h = hashlib.sha256()
    for t in model.parameters():
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    if rank == 0:
        print(json.dumps({"event": "done", "epochs": a.epochs, "steps": steps,
                          "train_loss": loss_sum / max(1, n_steps), "test_loss": test_loss,
                          "test_accuracy": acc, "images_per_sec": images / train_time,
                          "world_size": world, "params_sha256": h.hexdigest(),
                          "loader": a.loader}), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
