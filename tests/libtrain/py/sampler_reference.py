"""Prints torch.utils.data.DistributedSampler's index lists as JSON, for sampler_test.cpp.

usage: sampler_reference.py  (reads cases 'n world seed epoch drop_last shuffle' from stdin)
"""
import json
import sys

from torch.utils.data import DistributedSampler

out = []
for line in sys.stdin:
    if not line.strip():
        continue
    n, world, seed, epoch, drop_last, shuffle = (int(v) for v in line.split())
    per_rank = []
    for rank in range(world):
        s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=bool(shuffle),
                               seed=seed, drop_last=bool(drop_last))
        s.set_epoch(epoch)
        per_rank.append(list(s))
    out.append(per_rank)
print(json.dumps(out))
