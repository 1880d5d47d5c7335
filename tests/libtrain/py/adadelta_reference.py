"""Writes inputs and torch.optim.Adadelta's results as raw float32 files for adadelta_test.cpp.

usage: adadelta_reference.py OUTDIR STEPS LR RHO EPS WEIGHT_DECAY
"""
import sys

import torch

out, steps = sys.argv[1], int(sys.argv[2])
lr, rho, eps, wd = (float(v) for v in sys.argv[3:7])
torch.manual_seed(1234)
shapes = [(32, 1, 3, 3), (32,), (10, 128)]
params = [torch.randn(s) for s in shapes]
grads = [[torch.randn(s) * (0.1 * (k + 1)) for s in shapes] for k in range(steps)]
for i, p in enumerate(params):
    p.numpy().astype("float32").tofile(f"{out}/param{i}.bin")
    for k in range(steps):
        grads[k][i].numpy().astype("float32").tofile(f"{out}/grad{i}_{k}.bin")
ps = [p.clone().requires_grad_(True) for p in params]
opt = torch.optim.Adadelta(ps, lr=lr, rho=rho, eps=eps, weight_decay=wd, foreach=False)
for k in range(steps):
    for i, p in enumerate(ps):
        p.grad = grads[k][i].clone()
    opt.step()
for i, p in enumerate(ps):
    p.detach().numpy().astype("float32").tofile(f"{out}/result{i}.bin")
