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
import os
import pickle

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import bench_common as bc

MEAN, STD = 0.5, 0.5


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="torchvision root holding cifar-10-batches-py")
    bc.add_training_args(p, batch_size=256, lr=0.1)
    bc.add_run_args(p)
    a = p.parse_args()

    world, rank, dev = bc.init_distributed(a)

    folder = os.path.join(a.data, "cifar-10-batches-py")
    xtr, ytr = load_split(folder, [f"data_batch_{i}" for i in range(1, 6)], a.limit_train_samples)
    xte, yte = load_split(folder, ["test_batch"], a.limit_test_samples)
    torch.manual_seed(a.seed)
    model = Net().to(dev)
    ddp = bc.wrap_ddp(model, world)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)

    loader = bc.TrainLoader(a.loader, xtr, ytr, MEAN, STD, False, a.batch_size, world, rank, a.seed, dev)

    steps, images, train_time, loss_sum, n_steps = 0, 0, 0.0, 0.0, 0
    for epoch in range(1, a.epochs + 1):
        loss_sum, n_steps, n_images, seconds = bc.train_epoch(ddp, opt, F.cross_entropy, loader, epoch, dev, world)
        images += n_images
        train_time += seconds
        steps += n_steps

    x = bc.normalized(xte, MEAN, STD).to(dev)
    y = bc.labels_tensor(yte).to(dev)
    test_loss, acc = bc.evaluate(model, x, y, a.test_batch_size, F.cross_entropy)
    bc.print_done(rank, a, steps, loss_sum / max(1, n_steps), test_loss, acc, images / train_time, world, model)
    bc.finish_distributed(world)


if __name__ == "__main__":
    main()
