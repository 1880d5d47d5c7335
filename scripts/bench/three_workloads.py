"""The three-workload GPU benchmark, with a fourth, small recurrent workload (a GRU classifier):
libtrain against the Python peers on the same GPUs, in one invocation. Not part of libtrain.

  mnist        `train --model mnist` (Adadelta) on Fashion-MNIST        batch 64 and 512 per GPU
  resnet18     `train --model resnet18` (SGD Nesterov, warm-up + cosine) on CIFAR-10's layout
               (random records from make_cifar10.py unless --cifar-data holds real ones)      128 and 512
  transformer  build/bin/transformer_bench, a user's program on the Trainer API (AdamW,
               warm-up + cosine), 6 x 512, 8 heads, FFN 2048, sequence 256, vocabulary 8192     16 and 64
  gru          build/bin/gru_bench, a user's program on the Trainer API (fused AdamW, warm-up +
               cosine): a 1-layer GRU, 4 features, hidden 32, sequence 32, 4 classes (3,780
               parameters), on generated sequences                                            64 and 512

For each workload, world size (--nproc) and precision (fp32, bf16): libtrain's rows (each a
`train` run of 2 short epochs, or more where the data set holds fewer steps than the peers' timed
window (MNIST and CIFAR-10 at large batches x ranks); images_per_sec = the steady epochs; `step` = what the log's
"training step:" line says ran: cuda_graph or eager), then peers.py's eager and graph modes in one
process group, and last, while --budget-s lasts, its torch.compile mode (slow to compile).
Runs that don't fit the budget are skipped and listed. Rows go to --results (JSON lines:
workload, impl, mode, precision, world_size, batch_size, images_per_sec, step for libtrain,
tokens_per_sec and mfu for the transformer, model_params for the gru); the table gives each
libtrain row's ratio against the fastest Python peer of the same workload, world, batch and
precision, and against eager.

usage (GPU node, after scripts/gpu-check.sh built build-gpu/):
  python3 scripts/bench/three_workloads.py --build build-gpu --mnist-data DIR [--nproc 1,2]
  python3 scripts/bench/three_workloads.py --build build-gpu --workloads gru --nproc 1,2   # the GRU alone
  python3 scripts/bench/three_workloads.py --device cpu --tiny --build build --precisions fp32  # CPU check
  python3 scripts/bench/three_workloads.py --table RESULTS.jsonl                 # the table again
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

WORKLOADS = ("mnist", "resnet18", "transformer", "gru")
BATCHES = {"mnist": [64, 512], "resnet18": [128, 512], "transformer": [16, 64], "gru": [64, 512]}
# Steps of each libtrain epoch and of peers.py's timed window / warm-up, per workload, on a GPU.
STEPS = {"mnist": (300, 300, 30), "resnet18": (40, 40, 10), "transformer": (40, 40, 5), "gru": (300, 300, 30)}
TINY_STEPS = {"mnist": (4, 4, 2), "resnet18": (2, 2, 1), "transformer": (6, 6, 2), "gru": (4, 4, 2)}
# The programs each workload's libtrain rows run (besides trainctl for several ranks).
PROGRAMS = {"mnist": "train", "resnet18": "train", "transformer": "transformer_bench", "gru": "gru_bench"}
MNIST_TRAIN = 60000
CIFAR_TRAIN = 50000
TRANSFORMER = {"layers": 6, "d_model": 512, "heads": 8, "ffn": 2048, "seq_len": 256, "vocab": 8192}
TINY_TRANSFORMER = {"layers": 2, "d_model": 32, "heads": 4, "ffn": 64, "seq_len": 16, "vocab": 32}
GRU = {"features": 4, "hidden": 32, "seq_len": 32}
TINY_GRU = {"features": 4, "hidden": 16, "seq_len": 16}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(REPO, "build-gpu"))
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--nproc", default="1,2", help="world sizes, comma list")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--modes", default="eager,graph,compile", help="the Python peers' modes")
    p.add_argument("--batch-sizes", default="", help="override for all workloads, e.g. 64,512")
    p.add_argument("--mnist-data", default="", help="Fashion-MNIST (or MNIST) IDX folder (default: "
                   "$TRAIN_FASHION_MNIST_DIR, .deps/fashion-mnist, /usr/share/datasets/fashion-mnist)")
    p.add_argument("--cifar-data", default="", help="CIFAR-10 binary folder (default: random records "
                   "written by make_cifar10.py into a temporary folder)")
    p.add_argument("--results", default=os.path.join(REPO, "logs", "bench", "three_workloads.jsonl"))
    p.add_argument("--budget-s", type=float, default=450, help="stop starting runs after this many seconds")
    p.add_argument("--run-timeout-s", type=float, default=150)
    p.add_argument("--tiny", action="store_true", help="tiny sizes and steps (CPU validation)")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--commit", default="")
    p.add_argument("--libtrain-args", default="", help="extra flags for every libtrain row (an A/B of a "
                   "setting, e.g. \"--peer-allreduce on\"); recorded in the rows")
    p.add_argument("--table", metavar="RESULTS", help="only print the table of a results file")
    return p.parse_args()


def mnist_dir(a):
    for d in (a.mnist_data, os.environ.get("TRAIN_FASHION_MNIST_DIR", ""), os.path.join(REPO, ".deps", "fashion-mnist"),
              "/usr/share/datasets/fashion-mnist"):
        if d and os.path.isdir(d):
            return d
    sys.exit("three_workloads: no Fashion-MNIST folder found; pass --mnist-data DIR (the IDX files)")


def cifar_dir(a, tmp):
    if a.cifar_data:
        return a.cifar_data
    d = os.path.join(tmp, "cifar10")
    n_train, n_test = (64, 16) if a.tiny else (CIFAR_TRAIN, 1000)
    subprocess.run([a.python, os.path.join(HERE, "make_cifar10.py"), "--out", d, "--train", str(n_train),
                    "--test", str(n_test)], check=True)
    return d


class Clock:
    """The run's budget: the time left, and the runs skipped for want of it."""

    def __init__(self, budget):
        self.t0, self.budget, self.skipped = time.monotonic(), budget, []

    def left(self):
        return self.budget - (time.monotonic() - self.t0)

    def allow(self, what, need=5.0):
        if self.left() < need:
            self.skipped.append(what)
            print(f"skipped (budget): {what}", flush=True)
            return False
        return True


def run_cmd(cmd, timeout, env=None):
    """Runs cmd in its own session (killed whole after timeout). Returns (rc, stdout, stderr)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        timer = threading.Timer(max(timeout, 1), lambda: os.killpg(proc.pid, 9))
        timer.start()
        rc = proc.wait()
        timer.cancel()
        out.seek(0), err.seek(0)
        return rc, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def json_lines(text):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[r"):
            line = line.split("] ", 1)[-1]
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def step_kind(stderr):
    """cuda_graph or eager, from the log's last "training step:" line."""
    lines = [l for l in stderr.splitlines() if "training step:" in l]
    if not lines:
        return "unknown"
    return "cuda_graph" if "CUDA graph" in lines[-1] else "eager"


def device_name(a):
    if a.device != "cuda":
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.splitlines()
        return out[0].strip() if out else "unknown GPU"
    except (OSError, subprocess.SubprocessError):
        return "unknown GPU"


def dims_flags(dims):
    return [x for k, v in dims.items() for x in ("--" + k.replace("_", "-"), str(v))]


def launch_prefix(a, world, python_program=False):
    if world == 1:
        return [a.python] if python_program else []
    if python_program:
        return [a.python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"]
    return [os.path.join(a.build, "bin", "trainctl"), "local", "--nproc", str(world), "--no-prefix", "--"]


def libtrain_cmd(a, wl, world, batch, precision, data):
    """The `train` (transformer_bench, gru_bench) command of one libtrain row: 2 epochs of `steps` steps."""
    steps = (TINY_STEPS if a.tiny else STEPS)[wl][0]
    cpu = a.device == "cpu"
    # --tf32 off: the Python peers turn TF32 off in cuBLAS and cuDNN; libtrain's --tf32 auto would
    # leave cuDNN's on (PyTorch's default) and its fp32 convolutions would not be fp32.
    common = ["--device", a.device, "--epochs", "2", "--batch-size", str(batch), "--precision", precision,
              "--log-interval", "1000000", "--threads", "1" if cpu else "4", "--seed", "1"]
    if not cpu:
        common += ["--tf32", "off"]
    test = "16" if a.tiny else "1000"
    if wl in ("transformer", "gru"):
        n = steps * batch * world
        dims = a.dims if wl == "transformer" else a.gru_dims
        cmd = [os.path.join(a.build, "bin", PROGRAMS[wl])] + dims_flags(dims) + [
            "--train-sequences", str(n), "--eval-sequences", str(16 if a.tiny else 2 * batch)]
    else:
        n = min(MNIST_TRAIN if wl == "mnist" else CIFAR_TRAIN, steps * batch * world)
        cmd = [os.path.join(a.build, "bin", "train"), "--model", wl, "--data", data[wl],
               "--limit-train-samples", str(n), "--limit-test-samples", test]
        # Where the data set holds fewer than `steps` steps of all ranks' batches, enough epochs
        # that the steady ones (after the first) still hold `steps` steps, as the peers' window does.
        per_epoch = -(-n // (batch * world))
        common[common.index("--epochs") + 1] = str(1 + max(1, -(-steps // per_epoch)))
    return launch_prefix(a, world) + cmd + common + a.libtrain_args.split()


def libtrain_row(a, wl, world, batch, precision, data, env):
    cmd = libtrain_cmd(a, wl, world, batch, precision, data)
    rc, out, err = run_cmd(cmd, min(a.run_timeout_s, a.clock.left()), env)
    rows = json_lines(out)
    done = [r for r in rows if r.get("event") == "done" or "params_sha256" in r]
    row = {"workload": wl, "impl": "libtrain", "mode": "default", "precision": precision, "world_size": world,
           "batch_size": batch}
    if a.libtrain_args:
        row["libtrain_args"] = a.libtrain_args
    if rc != 0 or not done:
        print(f"FAILED ({rc}): {' '.join(cmd)}\n{err[-2500:]}", flush=True)
        return dict(row, images_per_sec=None, error=f"exit {rc}")
    d = done[-1]
    row.update(precision=d.get("precision", precision), images_per_sec=round(d["images_per_sec_steady"], 1),
               images_per_sec_whole=round(d["images_per_sec"], 1), step=step_kind(err), steps=d.get("steps"),
               train_loss=d.get("train_loss"), params_sha256=d.get("params_sha256"),
               peak_gpu_mb=d.get("peak_gpu_mb"))
    extra = [r for r in rows if r.get("event") == "transformer"]
    if wl == "transformer" and extra:
        flops = extra[-1]["flops_per_seq"]
        sps = row["images_per_sec"]
        row.update(tokens_per_sec=round(sps * a.dims["seq_len"], 1), flops_per_seq=flops,
                   mfu=mfu(a, sps / world, flops, row["precision"]))
    extra = [r for r in rows if r.get("event") == "gru"]
    if wl == "gru" and extra:
        row.update(model_params=extra[-1]["params"], seq_len=extra[-1]["seq_len"])
    return row


def mfu(a, sps_per_card, flops, precision):
    from peers import peak_tflops  # noqa: E402  (imports torch: only where a transformer row needs it)
    peak = peak_tflops(a.device_name, precision)
    return round(sps_per_card * flops / (peak * 1e12), 4) if peak else None


def peer_rows(a, wl, world, modes, env, timeout):
    steps, warmup = (TINY_STEPS if a.tiny else STEPS)[wl][1:]
    cmd = launch_prefix(a, world, python_program=True) + [
        os.path.join(HERE, "peers.py"), "--workload", wl, "--mode", ",".join(modes),
        "--precision", ",".join(a.precision_list), "--batch-size", ",".join(map(str, a.batches[wl])),
        "--steps", str(steps), "--warmup", str(warmup), "--device", a.device, "--threads", "1"]
    if wl == "transformer":
        cmd += dims_flags(a.dims)
    if wl == "gru":
        cmd += dims_flags(a.gru_dims)
    rc, out, err = run_cmd(cmd, timeout, env)
    rows = [r for r in json_lines(out) if r.get("impl") == "python"]
    if rc != 0:
        print(f"peers.py exited {rc} after {len(rows)} rows: {' '.join(cmd)}\n{err[-2500:]}", flush=True)
    for line in err.splitlines():
        if line.startswith("peers.py:"):
            print(line, flush=True)
    return rows


def table(rows):
    """One line per libtrain row: its samples/s, the fastest Python peer's and eager Python's, and
    the ratios (fp32 against Python fp32, bf16 against Python bf16 autocast)."""
    key = lambda r: (r["workload"], r["world_size"], r["batch_size"], r["precision"])  # noqa: E731
    peers = {}
    for r in rows:
        if r.get("impl") == "python" and r.get("images_per_sec"):
            peers.setdefault(key(r), {})[r["mode"]] = r["images_per_sec"]
    lines = ["| workload | GPUs x batch | prec | step | libtrain /s | fastest peer /s (mode) | ratio | eager /s | "
             "ratio | MFU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("impl") != "libtrain":
            continue
        ips = r.get("images_per_sec")
        p = peers.get(key(r), {})
        best = max(p.items(), key=lambda kv: kv[1]) if p else None
        eager = p.get("eager")
        ratio = lambda x: f"{ips / x:.2f}x" if ips and x else "-"  # noqa: E731
        mfu_s = f"{r['mfu'] * 100:.1f}%" if r.get("mfu") else ""
        lines.append(f"| {r['workload']} | {r['world_size']} x {r['batch_size']} | {r['precision']} | "
                     f"{r.get('step', '?')} | {ips or 'failed'} | "
                     f"{f'{best[1]} ({best[0]})' if best else '-'} | {ratio(best[1] if best else None)} | "
                     f"{eager or '-'} | {ratio(eager)} | {mfu_s} |")
    return "\n".join(lines)


def stamp(a, row):
    row.setdefault("device", a.device_name)
    row.update(run_id=a.run_id, date=f"{a.run_id[:4]}-{a.run_id[4:6]}-{a.run_id[6:8]}", commit=a.commit)
    with open(a.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)
    a.rows.append(row)


def setup(a):
    a.worlds = [int(w) for w in a.nproc.split(",") if w]
    a.workload_list = [w for w in a.workloads.split(",") if w]
    bad = [w for w in a.workload_list if w not in WORKLOADS]
    if bad:
        sys.exit(f"three_workloads: --workloads: unknown {bad}; expected some of {', '.join(WORKLOADS)}")
    a.precision_list = [p for p in a.precisions.split(",") if p]
    a.modes_list = [m for m in a.modes.split(",") if m]
    override = [int(b) for b in a.batch_sizes.split(",") if b]
    a.batches = {w: override or ([4, 8] if a.tiny else BATCHES[w]) for w in WORKLOADS}
    a.dims = TINY_TRANSFORMER if a.tiny else TRANSFORMER
    a.gru_dims = TINY_GRU if a.tiny else GRU
    a.device_name = device_name(a)
    a.run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    if not a.commit:
        a.commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip() or "unknown"
    a.clock, a.rows = Clock(a.budget_s), []
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    build_programs(a)


def build_programs(a):
    """Builds the programs the chosen workloads run where build/ is a Ninja tree that lacks them."""
    exes = ["train", "trainctl"] + sorted({PROGRAMS[w] for w in a.workload_list} - {"train"})
    target = lambda exe: "train_program" if exe == "train" else exe  # noqa: E731
    missing = [target(exe) for exe in exes if not os.path.exists(os.path.join(a.build, "bin", exe))]
    if missing and os.path.exists(os.path.join(a.build, "build.ninja")):
        print(f"three_workloads: building {', '.join(missing)} in {a.build}", flush=True)
        subprocess.run(["cmake", "--build", a.build, "-j", str(os.cpu_count() or 2), "--target"] + missing)
    for exe in exes:
        if not os.path.exists(os.path.join(a.build, "bin", exe)):
            sys.exit(f"three_workloads: {a.build}/bin/{exe} is missing; build it: cmake --build {a.build} "
                     f"--target {' '.join(target(e) for e in exes)}")


def main():
    a = parse_args()
    if a.table:
        with open(a.table) as f:
            print(table([json.loads(l) for l in f if l.strip()]))
        return
    setup(a)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        data = {"mnist": mnist_dir(a) if "mnist" in a.workload_list else "",
                "resnet18": cifar_dir(a, tmp) if "resnet18" in a.workload_list else ""}
        print(f"three_workloads: {a.device_name}, worlds {a.worlds}, budget {a.budget_s:.0f} s", flush=True)
        fast = [m for m in a.modes_list if m != "compile"]
        for wl in a.workload_list:
            for world in a.worlds:
                for precision in a.precision_list:
                    for batch in a.batches[wl]:
                        if a.clock.allow(f"libtrain {wl} {world}x{batch} {precision}"):
                            stamp(a, libtrain_row(a, wl, world, batch, precision, data, env))
                if fast and a.clock.allow(f"python {wl} {world} GPUs {','.join(fast)}"):
                    for r in peer_rows(a, wl, world, fast, env, min(240, a.clock.left())):
                        stamp(a, r)
        if "compile" in a.modes_list:
            for wl in a.workload_list:
                for world in a.worlds:
                    if a.clock.allow(f"python {wl} {world} GPUs compile", need=30):
                        for r in peer_rows(a, wl, world, ["compile"], env, a.clock.left()):
                            stamp(a, r)
    print("\n" + table(a.rows))
    print(f"\n{len(a.rows)} rows appended to {a.results}; {time.monotonic() - a.clock.t0:.0f} s")
    if a.clock.skipped:
        print("skipped for the budget: " + "; ".join(a.clock.skipped))


if __name__ == "__main__":
    main()
