#!/usr/bin/env python3
"""What snapshots in memory cost on the CPU: the same 2-rank run with --snapshot-every auto (the
default) and 0, alternating, under `trainctl local` (TRAIN_SNAPSHOT_DIR, a folder in /dev/shm, stands in
for a SLURM job's). Reports each run's steady images/s (the done line's images_per_sec_steady, which
counts the snapshots' time on the training thread) and the overhead, best against best and median
against median; and, since run-to-run noise on a shared host is often larger than the effect, the
overhead each auto run accounts for itself: the done line's snapshot_seconds (training thread) plus,
where the ranks' threads take every core, snapshot_write_seconds (the background write, then on a
core that trains), over train_seconds (docs/benchmarks.md). Not a test. Example:
  scripts/bench/snapshot_overhead.py --rounds 3 --epochs 1
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_once(build, every, args, work):
    ck = os.path.join(work, f"ck-{every}")
    # Node-local memory, as a SLURM job's default (/dev/shm/libtrain-UID-JOBID): not the work folder's disk.
    snaps = os.path.join("/dev/shm", f"snapshot-overhead-{os.getpid()}-{every}")
    shutil.rmtree(ck, ignore_errors=True)
    shutil.rmtree(snaps, ignore_errors=True)
    env = dict(os.environ, TRAIN_SNAPSHOT_DIR=snaps)
    cmd = [os.path.join(build, "trainctl"), "local", "--nproc", str(args.world), "--no-prefix", "--",
           os.path.join(build, "train"), "--epochs", str(args.epochs), "--threads", str(args.threads),
           "--batch-size", str(args.batch_size), "--limit-test-samples", "1000", "--checkpoint-dir", ck,
           "--snapshot-every", every, "--log-interval", "100000"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    shutil.rmtree(snaps, ignore_errors=True)
    if p.returncode != 0:
        sys.exit(f"snapshot_overhead: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    done = json.loads([l for l in p.stdout.splitlines() if l.startswith('{"event"')][-1])
    written = next((l for l in p.stderr.splitlines() if "snapshots: " in l and " written" in l), "")
    shares = args.world * args.threads >= os.cpu_count()
    cost = done.get("snapshot_seconds", 0) + (done.get("snapshot_write_seconds", 0) if shares else 0)
    accounted = cost / done["train_seconds"] if done.get("snapshots") else None
    note = written.split("snapshots: ", 1)[-1].split(" dropped")[0] + " dropped" if written else ""
    if accounted is not None:
        note += (f"; {done['snapshots']} taken, {done['snapshot_seconds']:.3f} s on the training thread, "
                 f"{done['snapshot_write_seconds']:.3f} s writing: {100 * accounted:.2f}% accounted")
    return done["images_per_sec_steady"], done["params_sha256"], note, accounted


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--build", default=os.path.join(REPO, "build", "bin"))
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="snapshot-overhead-")
    rates = {"auto": [], "0": []}
    accounted = []
    shas = set()
    for r in range(args.rounds):
        for every in ("auto", "0") if r % 2 == 0 else ("0", "auto"):
            ips, sha, written, acc = run_once(args.build, every, args, work)
            rates[every].append(ips)
            if acc is not None:
                accounted.append(acc)
            shas.add(sha)
            print(f"round {r + 1}: --snapshot-every {every:4}: {ips:8.1f} img/s  {written}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    best = 1 - max(rates["auto"]) / max(rates["0"])
    median = 1 - statistics.median(rates["auto"]) / statistics.median(rates["0"])
    print(f"{cpu}, {args.world} ranks x {args.threads} thread(s), batch {args.batch_size}: snapshots cost "
          f"{100 * best:.2f}% (best vs best), {100 * median:.2f}% (median vs median); "
          f"params_sha256 {'equal' if len(shas) == 1 else 'DIFFERENT'} in all runs")
    if accounted:
        print(f"accounted by the runs themselves: {100 * statistics.median(accounted):.2f}% (median), "
              f"{100 * max(accounted):.2f}% (highest) of the training time")


if __name__ == "__main__":
    main()
