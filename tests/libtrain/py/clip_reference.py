"""Writes gradients and torch.nn.utils.clip_grad_norm_'s results on them (norm 2, foreach) as raw
float32 files for grad_clip_test.cpp, one thread so the reductions add in one order.

usage: clip_reference.py OUTDIR MAX_NORM...
  OUTDIR/grad{i}.bin: the gradients (parameter 1 has none); OUTDIR/clipped{i}_{k}.bin: the
  gradients after clip_grad_norm_(params, MAX_NORM[k]); OUTDIR/total_{k}.bin: the norm it returned.
"""
import sys

import torch

out, max_norms = sys.argv[1], [float(x) for x in sys.argv[2:]]
torch.set_num_threads(1)
torch.manual_seed(1234)
shapes = [(32, 1, 3, 3), (7,), (300, 700), (10, 128), (10,)]
grads = [torch.randn(s) * (0.01 * (i + 1)) for i, s in enumerate(shapes)]
for i, g in enumerate(grads):
    g.numpy().astype("float32").tofile(f"{out}/grad{i}.bin")
for k, max_norm in enumerate(max_norms):
    params = [torch.zeros(s, requires_grad=True) for s in shapes]
    for i, p in enumerate(params):
        p.grad = None if i == 1 else grads[i].clone()
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    total.reshape(1).numpy().astype("float32").tofile(f"{out}/total_{k}.bin")
    for i, p in enumerate(params):
        if p.grad is not None:
            p.grad.numpy().astype("float32").tofile(f"{out}/clipped{i}_{k}.bin")
