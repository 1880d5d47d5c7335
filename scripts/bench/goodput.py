#!/usr/bin/env python3
"""Goodput under failures: a 2-node job on the local SLURM cluster, with a failure injected every
--interval seconds, and where each failure's seconds went (docs/benchmarks.md, Goodput).

The job is the one users run: a script from `trainctl sbatch --nodes 2` (so `trainctl run` starts the
step and restarts it inside the allocation), `train` on Fashion-MNIST with --checkpoint-dir and
snapshots in memory (--snapshot-every auto). The failures come from outside, as on a real cluster:

  kill     kill -9 of rank 1's process
  stall    SIGSTOP of rank 1's process (a frozen rank: train's roll-call names it after --stall-timeout)
  preempt  scancel --signal=USR2 (train checkpoints, the job is requeued and starts again)
  node     node2's slurmd and its training task killed (a node that dies); the job goes on without it

While the job runs, this script reads the job's run record (train/base/run_record.h) every 0.1 s: the
newest step and when train reported it, each launch's times (process start, rendezvous begun and done,
state loaded and from where, first step) and trainctl run's restart entries (when it saw the failure,
when it launched srun again). For each failure it reports:

  detection   from the injection to trainctl run's first sight of it (an srun or train error line)
  relaunch    from then to srun's new launch (the failed step's tasks ending, trainctl run's decision)
  start       process start, libraries, data and model (to the rendezvous)
  rendezvous  the process group (and, with it, the other ranks' start)
  load        finding and loading the snapshot or checkpoint
  first step  the first optimizer step after the resume
  recompute   steps done again: the step train had reached at the failure (its last report plus the
              seconds since at the step rate) less the step resumed from, and their seconds

goodput = 1 - (sum over failures of downtime + recompute seconds) / (wall time from the first
training step to the end). With --baseline, the same job runs first without failures, and the
report adds the clean run's wall time over the faulty run's (comparable only without `node`, which
changes the world size).

Needs the local cluster (scripts/local-slurm.sh start) and a build (scripts/build.sh); runs as the
user who owns the cluster's processes (root on the test machines: it signals the tasks). Not a test.
Example: scripts/bench/goodput.py --interval 120 --failures kill,stall,preempt,node

--launcher local runs the same job without SLURM, as `trainctl local --nproc N --max-restarts 20`
(ranks on this machine, restarted by trainctl local, snapshots in this machine's memory) with the
failures `kill` and `stall`; with --device cuda it is the GPU path (a GPU machine has no SLURM):
  scripts/bench/goodput.py --launcher local --device cuda --build build-gpu/bin --interval 30 --failures kill,stall,kill
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINDS = ("kill", "stall", "preempt", "node")


def run(args, check=True, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        sys.exit(f"goodput: {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[:500]}")
    return p


def slurm_env():
    env = dict(os.environ)
    if "SLURM_CONF" not in env:
        conf = os.path.join(os.environ.get("TRAIN_SLURM_DIR", os.path.join(REPO, ".slurm")), "slurm.conf")
        if os.path.exists(conf):
            env["SLURM_CONF"] = conf
    return env


def step_seconds(build, args):
    """One optimizer step's seconds at --nproc ranks on this host (trainctl local, 150 steps, or
    3000 on a GPU)."""
    steps = 3000 if args.device == "cuda" else 150
    p = run([os.path.join(build, "trainctl"), "local", "--nproc", str(args.nproc), "--no-prefix", "--",
             os.path.join(build, "train"), "--epochs", "1000", "--max-steps", str(steps), "--threads", str(args.threads),
             "--batch-size", str(args.batch_size), "--limit-test-samples", str(args.limit_test_samples),
             "--device", args.device], env=slurm_env())
    done = json.loads([l for l in p.stdout.splitlines() if l.startswith('{"event"')][-1])
    return args.nproc * args.batch_size / done["images_per_sec_steady"]


def task_pid(job, procid, marker=None):
    """The train task of `job` with this SLURM_PROCID (its /proc/PID/environ), or None. With
    `marker` (trainctl local), the rank `procid` (RANK) whose environment holds `marker`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
            if comm != "train":
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if marker is not None:
            if marker.encode() in env and f"RANK={procid}".encode() in env:
                return int(entry)
        elif f"SLURM_JOB_ID={job}".encode() in env and f"SLURM_PROCID={procid}".encode() in env:
            return int(entry)
    return None


def slurmd_pid(node):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"slurmd") and b"-N" in argv and node.encode() in argv:
            return int(entry)
    return None


def inject(kind, job, env, marker=None):
    """Injects one failure now; returns its Unix time, or None when its target was not found."""
    if kind in ("kill", "stall"):
        pid = task_pid(job, 1, marker)
        if pid is None:
            return None
        t = time.time()
        os.kill(pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        return t
    if kind == "preempt":
        t = time.time()
        run(["scancel", "--signal=USR2", job], env=env)
        return t
    if kind == "node":
        pid, task = slurmd_pid("node2"), task_pid(job, 1)
        if pid is None or task is None:
            return None
        t = time.time()
        os.kill(pid, signal.SIGKILL)
        os.kill(task, signal.SIGKILL)
        return t
    raise ValueError(kind)


def job_state(job, env):
    p = run(["scontrol", "show", "job", "-o", job], check=False, env=env)
    m = re.search(r"JobState=(\S+)", p.stdout)
    return m.group(1) if m else "UNKNOWN"


class Watch:
    """The run record, read every 0.1 s: progress samples and each launch's latest times."""

    def __init__(self, path):
        self.path = path
        self.progress = []   # (progress_time, progress_step), in order, once each
        self.launches = {}   # started -> launch times (the latest seen)
        self.record = {}

    def poll(self):
        try:
            with open(self.path) as f:
                r = json.load(f)
        except (OSError, ValueError):
            return
        self.record = r
        t, s = r.get("progress_time", 0), r.get("progress_step", 0)
        if t > 0 and (not self.progress or self.progress[-1][0] != t):
            self.progress.append((t, s))
        launch = r.get("launch") or {}
        if launch.get("started", 0) > 0:
            self.launches[launch["started"]] = launch

    def rate_near(self, t, before=True, window=30.0):
        """Steps per second from the progress samples in the window before (or after) time t."""
        pts = [p for p in self.progress if (t - window <= p[0] <= t if before else t <= p[0] <= t + window)]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])

    def step_at(self, t):
        """The step reached at time t: the last report before t plus the seconds since at the rate."""
        before = [p for p in self.progress if p[0] <= t]
        rate = self.rate_near(t)
        if not before or rate is None:
            return None
        return before[-1][1] + (t - before[-1][0]) * rate


def train_args(args, steps):
    return ["--epochs", "1000", "--max-steps", str(steps), "--threads", str(args.threads),
            "--batch-size", str(args.batch_size), "--limit-test-samples", str(args.limit_test_samples),
            "--checkpoint-dir", "checkpoints", "--snapshot-every", args.snapshot_every,
            "--stall-timeout", str(args.stall_timeout), "--log-interval", "200", "--device", args.device]


def write_job(work, build, args, steps, env):
    train_args_ = train_args(args, steps)
    script = os.path.join(work, "job.sh")
    run([os.path.join(build, "trainctl"), "sbatch", "--nodes", "2", "--ntasks-per-node", "1", "--cpus-per-task",
         str(args.threads), "--max-restarts", "20", "--job-name", "goodput", "--no-preflight", "--out", script,
         "--"] + train_args_, env=env, cwd=work)
    return script


def submit(work, script, build, env):
    env = dict(env, TRAIN_BIN=os.path.join(build, "train"), TRAINCTL_BIN=os.path.join(build, "trainctl"))
    p = run(["sbatch", "--parsable", script], env=env, cwd=work)
    return p.stdout.strip().split(";")[0]


def watch_job(args, watch, failures, job, env, finished, cancel, marker=None):
    """Injects `failures` every args.interval seconds of training while reading the run record;
    returns the injections [(kind, time)], the first training time and the end time."""
    injected, pending = [], list(failures)
    first, end, next_at = None, None, None
    while True:
        time.sleep(0.1)
        watch.poll()
        now = time.time()
        if first is None and watch.launches:
            first = min((l.get("training", 0) for l in watch.launches.values() if l.get("training", 0) > 0),
                        default=None)
            if first is not None:
                next_at = first + args.interval
        if pending and next_at is not None and now >= next_at:
            t = inject(pending[0], job, env, marker)
            if t is not None:
                print(f"goodput: {pending[0]} at {t - first:.1f} s", flush=True)
                injected.append((pending.pop(0), t))
                next_at = t + args.interval
        if watch.record.get("state") in ("done", "failed", "cancelled", "nonfinite") and not pending and finished():
            end = watch.record.get("updated", now)
            break
        if now - (first or now) > args.interval * (len(failures) + 4) + 600:
            cancel()
            sys.exit(f"goodput: job {job} did not end in time; cancelled.")
    return injected, first, end


def run_job(args, build, steps, failures, env):
    """Runs one job, injecting `failures` every args.interval seconds of its training; returns what
    the watch saw, the injections [(kind, time)], the first training time and the end time."""
    work = tempfile.mkdtemp(prefix="goodput-", dir=args.work_root)
    os.makedirs(os.path.join(work, "logs"), exist_ok=True)
    job = submit(work, write_job(work, build, args, steps, env), build, env)
    watch = Watch(os.path.join(work, ".train", "runs", job + ".json"))
    print(f"goodput: job {job} in {work}: {steps} steps, failures {','.join(failures) or 'none'}", flush=True)
    injected, first, end = watch_job(
        args, watch, failures, job, env,
        finished=lambda: job_state(job, env) not in ("RUNNING", "PENDING", "REQUEUED", "COMPLETING"),
        cancel=lambda: run(["scancel", job], check=False, env=env))
    state = job_state(job, env)
    log = "".join(open(os.path.join(work, "logs", f)).read() for f in sorted(os.listdir(os.path.join(work, "logs"))))
    events = [json.loads(l) for l in log.splitlines() if l.startswith('{"event"')]
    return dict(job=job, work=work, watch=watch, injected=injected, first=first, end=end, state=state,
                done=events[-1] if events else {})


def run_local(args, build, steps, failures, env):
    """The same job under `trainctl local --max-restarts` (no SLURM): --nproc ranks on this machine."""
    work = tempfile.mkdtemp(prefix="goodput-", dir=args.work_root)
    record = os.path.join(work, "run.json")
    env = dict(env, TRAIN_RUN_RECORD=record, TRAIN_SNAPSHOT_DIR=os.path.join("/dev/shm", os.path.basename(work)))
    cmd = [os.path.join(build, "trainctl"), "local", "--nproc", str(args.nproc), "--max-restarts", "20",
           "--grace-period", "3", "--no-prefix", "--", os.path.join(build, "train")] + train_args(args, steps) + \
          ["--resume", "auto"]
    out, err = open(os.path.join(work, "out.log"), "w"), open(os.path.join(work, "err.log"), "w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=work)
    job = f"local-{proc.pid}"
    print(f"goodput: {job} in {work}: {steps} steps, failures {','.join(failures) or 'none'}", flush=True)
    watch = Watch(record)
    injected, first, end = watch_job(args, watch, failures, job, env, finished=lambda: proc.poll() is not None,
                                     cancel=proc.kill, marker=f"TRAIN_RUN_RECORD={record}")
    proc.wait()
    out.close()
    err.close()
    events = [json.loads(l) for l in open(os.path.join(work, "out.log")) if l.startswith('{"event"')]
    return dict(job=job, work=work, watch=watch, injected=injected, first=first, end=end,
                state="COMPLETED" if proc.returncode == 0 else f"exit {proc.returncode}", done=events[-1] if events else {})


def breakdown(res):
    """Per failure: its components (seconds) from the record's restart entries and launches."""
    watch, rows = res["watch"], []
    restarts = watch.record.get("restarts", [])
    launches = sorted(watch.launches.values(), key=lambda l: l["started"])
    for i, (kind, t) in enumerate(res["injected"]):
        t_next = res["injected"][i + 1][1] if i + 1 < len(res["injected"]) else float("inf")
        launch = next((l for l in launches if l["started"] > t and l.get("training", 0) > 0), None)
        entries = [e for e in restarts if t <= e.get("time", 0) < t_next]
        row = dict(kind=kind, at=t - res["first"], restarts=len(entries))
        if launch is None:
            row["error"] = "no launch trained after it"
            rows.append(row)
            continue
        row["downtime"] = launch["training"] - t
        if entries:
            row["detection"] = entries[0]["time"] - t
            row["relaunch"] = entries[-1]["relaunched"] - entries[0]["time"]
            row["start"] = launch["connecting"] - entries[-1]["relaunched"]
        else:  # a requeue: no restart entry; the new job's launch started from the scheduler
            row["requeue"] = launch["started"] - t
            row["start"] = launch["connecting"] - launch["started"]
        row["rendezvous"] = launch["connected"] - launch["connecting"]
        row["load"] = launch["loaded"] - launch["connected"]
        row["first_step"] = launch["training"] - launch["loaded"]
        row["source"] = launch.get("source", "")
        row["resumed"] = launch.get("resumed_step", 0)
        reached = watch.step_at(t)
        rate = watch.rate_near(launch["training"], before=False) or watch.rate_near(t)
        if reached is not None and rate:
            row["reached"] = reached
            row["recomputed"] = max(0.0, reached - row["resumed"])
            row["recompute"] = row["recomputed"] / rate
        row["lost"] = row["downtime"] + row.get("recompute", 0.0)
        rows.append(row)
    return rows


def report(res, rows, baseline):
    wall = res["end"] - res["first"]
    lost = sum(r.get("lost", 0.0) for r in rows)
    cols = ["detection", "relaunch", "requeue", "start", "rendezvous", "load", "first_step", "downtime", "recompute"]
    print()
    print(f"job {res['job']}: {res['state']}, {res['done'].get('steps', '?')} steps, world size at the end "
          f"{res['done'].get('world_size', '?')}, wall {wall:.1f} s from the first step to the end")
    head = f"{'failure':9} {'at s':>6} " + " ".join(f"{c:>10}" for c in cols) + f" {'steps again':>11} {'from':>10}"
    print(head)
    for r in rows:
        if "error" in r:
            print(f"{r['kind']:9} {r['at']:6.1f} {r['error']}")
            continue
        cells = " ".join(f"{r[c]:10.2f}" if c in r else f"{'-':>10}" for c in cols)
        again = f"{r['recomputed']:.1f}" if "recomputed" in r else "?"
        print(f"{r['kind']:9} {r['at']:6.1f} {cells} {again:>11} {r['source'] + ' ' + str(r['resumed']):>10}")
    goodput = 1 - lost / wall if wall > 0 else 0
    print(f"lost {lost:.1f} s of {wall:.1f} s: goodput {100 * goodput:.1f}% "
          f"({len(rows)} failure(s), one every {wall / max(1, len(rows)):.0f} s)")
    out = dict(job=res["job"], state=res["state"], wall=wall, lost=lost, goodput=goodput, failures=rows,
               params_sha256=res["done"].get("params_sha256"), world_size_end=res["done"].get("world_size"))
    if baseline:
        clean = baseline["end"] - baseline["first"]
        print(f"the same job without failures: {clean:.1f} s; clean / faulty wall = {clean / wall:.3f}"
              + (" (the world size changed: not comparable)" if res["done"].get("world_size") != 2 else ""))
        out["clean_wall"] = clean
        out["clean_sha_equal"] = baseline["done"].get("params_sha256") == res["done"].get("params_sha256")
    return out


def restore_node2(env):
    """Starts node2's slurmd again (after `node`) and returns it to service."""
    if slurmd_pid("node2") is None:
        run([os.path.join(REPO, "scripts", "local-slurm.sh"), "start"], check=False, env=env)
    run(["scontrol", "update", "nodename=node2", "state=resume"], check=False, env=env)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=120, help="seconds of training between failures (default 120)")
    p.add_argument("--failures", default="kill,stall,preempt,node",
                   help=f"comma separated, in order, of {','.join(KINDS)} (default kill,stall,preempt,node)")
    p.add_argument("--tail", type=float, default=None, help="seconds of training after the last failure (default: --interval)")
    p.add_argument("--stall-timeout", type=float, default=5, help="train's --stall-timeout (default 5)")
    p.add_argument("--snapshot-every", default="auto", help="train's --snapshot-every (default auto)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--limit-test-samples", type=int, default=1000)
    p.add_argument("--baseline", action="store_true", help="run the same job without failures first")
    p.add_argument("--build", default=os.path.join(REPO, "build", "bin"))
    p.add_argument("--work-root", default=None, help="where the jobs' folders go (default: the system's temp)")
    p.add_argument("--json", default=None, help="also write the results to this file")
    p.add_argument("--launcher", default="slurm", choices=["slurm", "local"],
                   help="slurm: a trainctl sbatch job on the local cluster (default); local: trainctl local "
                        "--max-restarts on this machine (kill and stall only)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="train's --device (default cpu)")
    p.add_argument("--nproc", type=int, default=2, help="ranks with --launcher local (default 2)")
    args = p.parse_args()
    failures = [f for f in args.failures.split(",") if f]
    kinds = KINDS if args.launcher == "slurm" else ("kill", "stall")
    for f in failures:
        if f not in kinds:
            p.error(f"--failures: expected some of {','.join(kinds)} with --launcher {args.launcher}, found '{f}'")
    if "node" in failures[:-1]:
        p.error("--failures: 'node' leaves the job one node: put it last")
    if args.launcher == "slurm" and args.nproc != 2:
        p.error("--nproc: the SLURM job has 2 nodes x 1 task; --nproc is for --launcher local")
    env = slurm_env()
    if args.launcher == "slurm" and run(["sinfo", "-h"], check=False, env=env).returncode != 0:
        sys.exit("goodput: no SLURM cluster answers. Hint: scripts/local-slurm.sh start")
    step = step_seconds(args.build, args)
    tail = args.interval if args.tail is None else args.tail
    steps = int((args.interval * len(failures) + tail) / step)
    print(f"goodput: a step takes {1000 * step:.2f} ms at {args.nproc} ranks here: {steps} steps for "
          f"{args.interval * len(failures) + tail:.0f} s of training", flush=True)
    run_one = run_job if args.launcher == "slurm" else run_local
    baseline = run_one(args, args.build, steps, [], env) if args.baseline else None
    try:
        res = run_one(args, args.build, steps, failures, env)
    finally:
        if "node" in failures:
            restore_node2(env)
    out = report(res, breakdown(res), baseline)
    gpu = run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], check=False).stdout.strip() \
        if args.device == "cuda" else ""
    out.update(interval=args.interval, stall_timeout=args.stall_timeout, step_seconds=step, launcher=args.launcher,
               device=args.device, nproc=args.nproc, gpu=gpu,
               cpu=next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"))
    if gpu:
        print(f"GPUs: {gpu.splitlines()[0]} x {len(gpu.splitlines())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
