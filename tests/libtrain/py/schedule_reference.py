"""Prints torch.optim.lr_scheduler.OneCycleLR's rates (cosine, two phases, no momentum cycling)
for schedule_test: one per line, from the start through TOTAL steps.

usage: schedule_reference.py MAX_LR TOTAL PCT_START DIV_FACTOR FINAL_DIV_FACTOR
"""
import sys

import torch

max_lr, total = float(sys.argv[1]), int(sys.argv[2])
pct, div, final_div = (float(v) for v in sys.argv[3:6])
p = torch.zeros(1, requires_grad=True)
opt = torch.optim.SGD([p], lr=max_lr)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=max_lr, total_steps=total, pct_start=pct,
                                            div_factor=div, final_div_factor=final_div, cycle_momentum=False,
                                            three_phase=False)
for step in range(total):
    print(repr(opt.param_groups[0]["lr"]))
    opt.step()
    sched.step()
