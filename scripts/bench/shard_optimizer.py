#!/usr/bin/env python3
"""What --shard-optimizer (ZeRO-1) costs and saves: the same `trainctl local` run with and without
it, alternating. On CPU ranks the MNIST recipe; on GPUs (--device cuda) the transformer of the
three-workload benchmark (transformer_bench: FusedAdamW, the step in a CUDA graph) or the MNIST
recipe (--workload mnist). Reports each run's steady samples/s (the done line's
images_per_sec_steady), the optimizer state per rank the log states, the peak CUDA memory per GPU
(peak_gpu_mb) and whether every run ended on the same params_sha256 (at 2 ranks it must: sharded
runs give unsharded DDP's bits). Not a test (docs/benchmarks.md). Examples:
  scripts/bench/shard_optimizer.py --rounds 3 --world 2 --optimizer adadelta
  scripts/bench/shard_optimizer.py --device cuda --workload transformer --world 2,4 --rounds 2
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(args, world, shard):
    prefix = [os.path.join(args.build, "trainctl"), "local", "--nproc", str(world), "--no-prefix", "--"]
    if args.device == "cuda" and args.workload == "transformer":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from three_workloads import TRANSFORMER  # noqa: E402  (the benchmark's model)
        batch = args.batch_size or 16
        dims = [x for k, v in TRANSFORMER.items() for x in ("--" + k.replace("_", "-"), str(v))]
        cmd = [os.path.join(args.build, "transformer_bench")] + dims + [
            "--train-sequences", str(args.steps * batch * world), "--eval-sequences", str(2 * batch),
            "--device", "cuda", "--epochs", "2", "--batch-size", str(batch), "--precision", args.precision,
            "--tf32", "off", "--log-interval", "1000000", "--seed", "1"]
    else:
        batch = args.batch_size or 64
        cmd = [os.path.join(args.build, "train"), "--epochs", "1", "--threads", str(args.threads), "--device",
               args.device, "--batch-size", str(batch), "--limit-train-samples", str(args.limit_train_samples),
               "--limit-test-samples", "1000", "--optimizer", args.optimizer, "--log-interval", "100000"]
    return prefix + cmd + (["--shard-optimizer"] if shard else [])


def run_once(args, world, shard):
    cmd = command(args, world, shard)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"shard_optimizer: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    done = json.loads([l for l in p.stdout.splitlines() if l.startswith('{"event"')][-1])
    state = re.search(r"optimizer state: (.*?\))", p.stderr)
    step = re.search(r"training step: (.*)", p.stderr)
    return (done["images_per_sec_steady"], done["params_sha256"], state.group(1) if state else "not sharded",
            done.get("peak_gpu_mb"), step.group(1) if step else "?")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--world", default="2", help="world sizes, comma list")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--workload", default="mnist", choices=["mnist", "transformer"], help="transformer: GPUs only")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=0, help="per rank (default 64; the transformer's 16)")
    p.add_argument("--steps", type=int, default=40, help="the transformer's steps per epoch")
    p.add_argument("--precision", default="fp32", help="the transformer's --precision")
    p.add_argument("--limit-train-samples", type=int, default=10000)
    p.add_argument("--optimizer", default="adadelta", help="adadelta or sgd: the fused SGD/Adam/AdamW "
                   "only shard, so an unsharded adam/adamw run would be torch's own, another optimizer")
    p.add_argument("--build", default=os.path.join(REPO, "build", "bin"))
    args = p.parse_args()
    if args.device == "cpu":
        where = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        what = f"{args.threads} thread(s), batch {args.batch_size or 64}, {args.optimizer}"
    else:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.split("\n")
        where = gpus[0].strip() if gpus else "?"
        what = (f"transformer, batch {args.batch_size or 16}, {args.precision}" if args.workload == "transformer"
                else f"MNIST, batch {args.batch_size or 64}, {args.optimizer}")
    for world in [int(w) for w in args.world.split(",")]:
        rates = {False: [], True: []}
        peaks = {False: [], True: []}
        shas = set()
        for r in range(args.rounds):
            for shard in (False, True) if r % 2 == 0 else (True, False):
                ips, sha, state, peak, step = run_once(args, world, shard)
                rates[shard].append(ips)
                peaks[shard].append(peak or 0)
                shas.add(sha)
                print(f"{world} ranks, round {r + 1}: {'sharded  ' if shard else 'unsharded'}: {ips:10.1f} samples/s"
                      f"{f'  peak {peak:.0f} MB' if peak else ''}  {state}  [{step}]", flush=True)
        best = max(rates[True]) / max(rates[False])
        median = statistics.median(rates[True]) / statistics.median(rates[False])
        memory = (f"; peak CUDA memory per GPU {max(peaks[True]):.0f} MB sharded vs {max(peaks[False]):.0f} MB"
                  if args.device == "cuda" else "")
        print(f"{where}, {world} ranks, {what}: sharded at {100 * best:.1f}% of unsharded (best vs best), "
              f"{100 * median:.1f}% (median vs median){memory}; params_sha256 "
              f"{'equal' if len(shas) == 1 else 'DIFFERENT'} in all runs" +
              (" (the transformer runs without --deterministic: its embedding's backward adds with atomics, so "
               "any two runs differ)" if args.device == "cuda" and args.workload == "transformer" else ""), flush=True)


if __name__ == "__main__":
    main()
