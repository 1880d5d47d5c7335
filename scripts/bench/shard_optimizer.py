#!/usr/bin/env python3
"""What --shard-optimizer (ZeRO-1) costs and saves on CPU ranks: the same `trainctl local` run of
the MNIST recipe with and without it, alternating. Reports each run's steady images/s (the done
line's images_per_sec_steady), the optimizer state per rank the log states, and whether every run
ended on the same params_sha256 (it must: sharded runs give unsharded DDP's bits on one machine).
Not a test (issue 33; docs/benchmarks.md). Example:
  scripts/bench/shard_optimizer.py --rounds 3 --world 2 --optimizer adadelta
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_once(args, shard):
    cmd = [os.path.join(args.build, "trainctl"), "local", "--nproc", str(args.world), "--no-prefix", "--",
           os.path.join(args.build, "train"), "--epochs", "1", "--threads", str(args.threads), "--device", "cpu",
           "--batch-size", str(args.batch_size), "--limit-train-samples", str(args.limit_train_samples),
           "--limit-test-samples", "1000", "--optimizer", args.optimizer, "--log-interval", "100000"]
    if shard:
        cmd.append("--shard-optimizer")
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"shard_optimizer: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    done = json.loads([l for l in p.stdout.splitlines() if l.startswith('{"event"')][-1])
    state = re.search(r"optimizer state: (.*?\))", p.stderr)
    return done["images_per_sec_steady"], done["params_sha256"], state.group(1) if state else "not sharded"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--limit-train-samples", type=int, default=10000)
    p.add_argument("--optimizer", default="adadelta", help="adadelta or sgd: the fused SGD/Adam/AdamW "
                   "only shard, so an unsharded adam/adamw run would be torch's own, another optimizer")
    p.add_argument("--build", default=os.path.join(REPO, "build", "bin"))
    args = p.parse_args()
    rates = {False: [], True: []}
    shas = set()
    for r in range(args.rounds):
        for shard in (False, True) if r % 2 == 0 else (True, False):
            ips, sha, state = run_once(args, shard)
            rates[shard].append(ips)
            shas.add(sha)
            print(f"round {r + 1}: {'sharded  ' if shard else 'unsharded'}: {ips:8.1f} img/s  {state}", flush=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    best = max(rates[True]) / max(rates[False])
    median = statistics.median(rates[True]) / statistics.median(rates[False])
    print(f"{cpu}, {args.world} ranks x {args.threads} thread(s), batch {args.batch_size}, {args.optimizer}: sharded "
          f"at {100 * best:.1f}% of unsharded (best vs best), {100 * median:.1f}% (median vs median); "
          f"params_sha256 {'equal' if len(shas) == 1 else 'DIFFERENT'} in all runs")


if __name__ == "__main__":
    main()
