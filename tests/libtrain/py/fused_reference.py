"""Writes inputs and Python's fused optimizers' results (fused=True) under a per-step warm-up +
cosine rate, as raw float32 files for fused_optim_test.cpp.

usage: fused_reference.py OUTDIR OPTIMIZER STEPS DEVICE
  OPTIMIZER: sgd | adam | adamw | adamw-amsgrad    DEVICE: cpu | cuda
On CUDA the rate is a float32 tensor on the device (capturable=True for Adam), refreshed with
fill_ before each step, as a whole-step CUDA graph would; on the CPU it is a number.
"""
import math
import sys

import torch

out, name, steps, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
BASE_LR, WARMUP = 0.05, 2


def factor(step):
    # libtrain's warmup_cosine(WARMUP) over `steps` steps (transformers' cosine schedule).
    if step < WARMUP:
        return step / WARMUP
    progress = min(max((step - WARMUP) / max(1, steps - WARMUP), 0.0), 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


torch.manual_seed(4321)
shapes = [(16, 3, 3, 3), (16,), (10, 64)]
params = [torch.randn(s) for s in shapes]
grads = [[torch.randn(s) * (0.1 * (k + 1)) for s in shapes] for k in range(steps)]
for i, p in enumerate(params):
    p.numpy().astype("float32").tofile(f"{out}/param{i}.bin")
    for k in range(steps):
        grads[k][i].numpy().astype("float32").tofile(f"{out}/grad{i}_{k}.bin")
ps = [p.clone().to(device).requires_grad_(True) for p in params]
cuda = device == "cuda"
lr = torch.tensor(BASE_LR * factor(0), device=device) if cuda else BASE_LR * factor(0)
if name == "sgd":
    opt = torch.optim.SGD(ps, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4, fused=True)
elif name == "adam":
    opt = torch.optim.Adam(ps, lr=lr, weight_decay=1e-2, fused=True, capturable=cuda)
else:
    opt = torch.optim.AdamW(ps, lr=lr, weight_decay=1e-2, amsgrad=name == "adamw-amsgrad", fused=True, capturable=cuda)
for k in range(steps):
    for i, p in enumerate(ps):
        p.grad = grads[k][i].clone().to(device)
    opt.step()
    rate = BASE_LR * factor(k + 1)
    for group in opt.param_groups:
        if cuda:
            group["lr"].fill_(rate)
        else:
            group["lr"] = rate
for i, p in enumerate(ps):
    p.detach().cpu().numpy().astype("float32").tofile(f"{out}/result{i}.bin")
