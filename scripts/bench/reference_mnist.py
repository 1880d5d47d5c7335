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
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR

import bench_common as bc

MEAN, STD = 0.1307, 0.3081


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    bc.add_training_args(p, batch_size=64, lr=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    bc.add_run_args(p, device=False)
    p.add_argument("--no-dropout", action="store_true")
    bc.add_device_arg(p)
    p.add_argument("--eval-every-epoch", action="store_true",
                   help="evaluate after every epoch and print an epoch JSON line (for time to accuracy)")
    a = p.parse_args()

    world, rank, dev = bc.init_distributed(a)

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
    ddp = bc.wrap_ddp(model, world)
    opt = torch.optim.Adadelta(model.parameters(), lr=a.lr)
    sched = StepLR(opt, step_size=1, gamma=a.gamma)

    loader = bc.TrainLoader(a.loader, xtr, ytr, MEAN, STD, True, a.batch_size, world, rank, a.seed, dev)
    xte_dev = bc.normalized(xte, MEAN, STD).unsqueeze(1).to(dev)
    yte_dev = bc.labels_tensor(yte).to(dev)

    def evaluate():
        return bc.evaluate(model, xte_dev, yte_dev, a.test_batch_size, F.nll_loss)

    def print_epoch(epoch, acc):
        if rank == 0:
            print(json.dumps({"event": "epoch", "epoch": epoch, "test_accuracy": acc, "time": time.time(),
                              "epoch_images_per_sec": epoch_ips[-1]}), flush=True)

    steps, images, train_time, epoch_ips = 0, 0, 0.0, []
    for epoch in range(1, a.epochs + 1):
        loss_sum, n_steps, n_images, seconds = bc.train_epoch(ddp, opt, F.nll_loss, loader, epoch, dev, world)
        images += n_images
        train_time += seconds
        epoch_ips.append(n_steps and loader.size / seconds)
        steps += n_steps
        sched.step()
        if a.eval_every_epoch and epoch < a.epochs:
            test_loss, acc = evaluate()
            print_epoch(epoch, acc)
            model.train()

    test_loss, acc = evaluate()
    if a.eval_every_epoch:
        print_epoch(a.epochs, acc)
    bc.print_done(rank, a, steps, loss_sum / max(1, n_steps), test_loss, acc, images / train_time, world, model,
                  images_per_sec_best=max(epoch_ips) if epoch_ips else 0.0,
                  peak_gpu_mb=torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else 0.0)
    bc.finish_distributed(world)


if __name__ == "__main__":
    main()
