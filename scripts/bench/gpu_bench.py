"""GPU benchmark: libtrain's `train` against the Python DDP reference on the same card, torch, model
(the MNIST CNN), data (full Fashion-MNIST), batch, world size and epochs, in one invocation.

usage: python3 scripts/bench/gpu_bench.py --build build-gpu --data DIR [--epochs 3]
           [--configs auto|1x64,2x64,...] [--results docs/benchmarks/results.jsonl]
For each WORLDxBATCH it runs libtrain (CUDA graph, fp32; then bf16; then eager for the ablation;
"between": several GPUs with the eager all-reduce between two graphs instead of NCCL in the graph;
"ddp1": one GPU through a process group and DDP (--ddp-single-rank), DDP's own cost; "ckpt": with
a checkpoint every epoch, for the share of the run that evaluation and checkpoints take) and Python DDP with the dataset resident on the GPU (and, at 1x64, with the DataLoader as cluster
wikis write it). Steady images/s: libtrain's epochs after the first, Python's best epoch. Whole:
all epochs. Time to 91%: from launching the process to the end of the first epoch whose test
accuracy reaches 0.91. Prints a table with the card's name, and appends one JSON row per run.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_TIMEOUT_S = 150  # a run still going after this is killed and reported as failed


def run(cmd, env):
    """Runs cmd; returns (stdout lines as JSON objects, launch time, wall seconds, peak RSS MB)."""
    t_launch = time.time()
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as errf:
        # Own process group: a run past its time is killed with all its ranks, none left on a GPU.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, env=env, start_new_session=True)
        timer = __import__("threading").Timer(RUN_TIMEOUT_S, lambda: os.killpg(proc.pid, 9))
        timer.start()
        out = proc.stdout.read()
        _, status, rusage = os.wait4(proc.pid, 0)
        timer.cancel()
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(err[-3000:])
        print(f"FAILED ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}", flush=True)
        return None, t_launch, wall, 0.0, err
    objs = []
    for line in out.decode().splitlines():
        line = line.strip()
        if line.startswith("[r"):
            line = line.split("] ", 1)[-1]
        if line.startswith("{"):
            try:
                objs.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return objs, t_launch, wall, rusage.ru_maxrss / 1024.0, err


def seconds_to(epochs, t_launch, target=0.91):
    for e in epochs:
        if e.get("test_accuracy", 0) >= target:
            return e["time"] - t_launch
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--configs", default="auto",
                   help="WORLDxBATCH list; auto: 1, 2, 4 and 8 GPUs as far as this node has them, at 64 and 512")
    p.add_argument("--results", default=os.path.join(REPO, "docs", "benchmarks", "results.jsonl"))
    p.add_argument("--no-python-dataloader", action="store_true", help="skip the slow DataLoader run")
    p.add_argument("--commit", help="the commit to record in the rows (default: git's HEAD here; pass it "
                                    "where the copy's .git is not the code's, e.g. a synced copy)")
    p.add_argument("--variants", default="graph,defaults,bf16,eager",
                   help="libtrain runs: graph (fp32), defaults (no flags: --precision auto), graphbench (with cuDNN "
                        "autotuning), bf16, eager, tf32, between (several GPUs), ddp1 (one GPU), ckpt, "
                        "cl (channels-last), clbf16")
    a = p.parse_args()

    import torch
    card = torch.cuda.get_device_name(0)
    if a.configs == "auto":
        worlds = [n for n in (1, 2, 4, 8) if n <= torch.cuda.device_count()]
        a.configs = ",".join(f"{w}x{b}" for b in (64, 512) for w in worlds)
    run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    date = datetime.date.today().isoformat()
    commit = a.commit
    try:  # the code the rows measure
        commit = commit or subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                          text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", OMP_NUM_THREADS="4")
    train = os.path.join(a.build, "bin", "train")
    trainctl = os.path.join(a.build, "bin", "trainctl")
    ref = os.path.join(REPO, "scripts", "bench", "reference_mnist.py")
    fp32 = ["--precision", "fp32"]
    variants = {"graph": ["--cuda-graph", "on"] + fp32, "graphbench": ["--cuda-graph", "on", "--cudnn-benchmark"] + fp32,
                "bf16": ["--cuda-graph", "on", "--precision", "bf16"],
                "eager": ["--cuda-graph", "off"] + fp32, "tf32": ["--cuda-graph", "on", "--precision", "tf32"],
                "between": ["--cuda-graph", "on", "--graph-allreduce", "between"] + fp32,
                "ddp1": ["--cuda-graph", "on", "--ddp-single-rank"] + fp32, "ckpt": ["--cuda-graph", "on"] + fp32,
                "cl": ["--cuda-graph", "on", "--channels-last", "on"] + fp32,
                "clbf16": ["--cuda-graph", "on", "--channels-last", "on", "--precision", "bf16"],
                "defaults": []}
    modes = {"eager": "eager", "graphbench": "cuda_graph+cudnn_benchmark", "between": "cuda_graph+allreduce_between",
             "ddp1": "cuda_graph+ddp_single_rank", "ckpt": "cuda_graph+checkpoints",
             "cl": "cuda_graph+channels_last", "clbf16": "cuda_graph+channels_last", "defaults": "defaults"}
    work = tempfile.mkdtemp(prefix="gpu_bench_")
    rows = []
    for config in a.configs.split(","):
        world, batch = (int(x) for x in config.split("x"))
        common = ["--data", a.data, "--epochs", str(a.epochs), "--batch-size", str(batch), "--threads", "4"]
        runs = []
        for v in a.variants.split(","):
            if (v == "between" and world == 1) or (v == "ddp1" and world > 1):
                continue
            metrics = tempfile.mktemp(suffix=".jsonl")
            cmd = [train, "--device", "cuda", "--log-interval", "1000000", "--metrics", metrics] + common + variants[v]
            if v == "ckpt":
                cmd += ["--checkpoint-dir", os.path.join(work, f"ck_{world}x{batch}")]
            if world > 1:
                cmd = [trainctl, "local", "--nproc", str(world), "--no-prefix", "--"] + cmd
            mode = modes.get(v, "cuda_graph")
            precision = {"bf16": "bf16", "tf32": "tf32", "clbf16": "bf16"}.get(v, "fp32")
            runs.append(("cpp", mode, precision, cmd, metrics))
        py = [sys.executable, ref, "--device", "cuda", "--eval-every-epoch"] + common
        if world > 1:
            py = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}"] + py[1:]
        runs.append(("python", "resident", "fp32", py + ["--loader", "resident"], None))
        if world == 1 and batch == 64 and not a.no_python_dataloader:
            runs.append(("python", "dataloader", "fp32", py + ["--loader", "dataloader"], None))
        for impl, mode, precision, cmd, metrics in runs:
            objs, t_launch, wall, rss, err = run(cmd, env)
            if objs is None or not [o for o in objs if o.get("event") == "done"]:
                continue
            done = [o for o in objs if o.get("event") == "done"][-1]
            if impl == "cpp":
                with open(metrics) as f:
                    epochs = [json.loads(l) for l in f if '"event": "epoch"' in l or '"event":"epoch"' in l]
                os.unlink(metrics)
                steady = done["images_per_sec_steady"]
            else:
                epochs = [o for o in objs if o.get("event") == "epoch"]
                steady = done["images_per_sec_best"]
            if impl == "cpp":
                precision = done.get("precision", precision)  # what --precision auto resolved to
            rows.append(dict(run_id=run_id, date=date, device=card, commit=commit, world_size=world, batch_size=batch, impl=impl,
                             mode=mode, precision=precision, images_per_sec=round(steady, 1),
                             images_per_sec_whole=round(done["images_per_sec"], 1), epochs=a.epochs,
                             test_accuracy=round(done["test_accuracy"], 4),
                             seconds_to_91=None if seconds_to(epochs, t_launch) is None else round(seconds_to(epochs, t_launch), 2),
                             peak_gpu_mb=round(done.get("peak_gpu_mb", 0.0), 1), host_rss_mb=round(rss, 1),
                             wall_s=round(wall, 2),
                             eval_seconds=round(sum(e.get("eval_seconds", 0) for e in epochs), 3) if impl == "cpp" else None))
            if impl == "cpp" and "train_seconds" in done:
                spent = done["train_seconds"] + done["eval_seconds"] + done["checkpoint_seconds"]
                rows[-1].update(train_seconds=round(done["train_seconds"], 3),
                                checkpoint_seconds=round(done["checkpoint_seconds"], 3),
                                eval_share=round(done["eval_seconds"] / spent, 4) if spent > 0 else None,
                                checkpoint_share=round(done["checkpoint_seconds"] / spent, 4) if spent > 0 else None)
            r = rows[-1]
            print(f"  {world}x{batch} {impl:6} {mode:10} {precision:5} {r['images_per_sec']:>10,.0f} img/s steady, "
                  f"acc {r['test_accuracy']:.4f}, to 91% {r['seconds_to_91']}, wall {r['wall_s']} s", flush=True)

    print(f"\nGPU: {card}; torch {torch.__version__}; MNIST CNN on full Fashion-MNIST, {a.epochs} epochs, Adadelta")
    print(f"{'world x batch':14} {'impl':7} {'mode':11} {'prec':5} {'steady img/s':>13} {'whole img/s':>12} "
          f"{'vs py resident':>15} {'test acc':>9} {'to 91% s':>9} {'GPU MB':>8} {'RSS MB':>8}")
    for r in rows:
        base = [x for x in rows if x["world_size"] == r["world_size"] and x["batch_size"] == r["batch_size"]
                and x["impl"] == "python" and x["mode"] == "resident"]
        ratio = r["images_per_sec"] / base[0]["images_per_sec"] if base else float("nan")
        print(f"{str(r['world_size']) + ' x ' + str(r['batch_size']):14} {r['impl']:7} {r['mode']:11} {r['precision']:5} "
              f"{r['images_per_sec']:13,.0f} {r['images_per_sec_whole']:12,.0f} {ratio:14.2f}x {r['test_accuracy']:9.4f} "
              f"{str(r['seconds_to_91']):>9} {r['peak_gpu_mb']:8.0f} {r['host_rss_mb']:8.0f}")
    def find(world, batch, impl="cpp", mode="cuda_graph", precision="fp32"):
        got = [r for r in rows if r["world_size"] == world and r["batch_size"] == batch and r["impl"] == impl
               and r["mode"] == mode and r["precision"] == precision]
        return got[0] if got else None

    for batch in sorted({r["batch_size"] for r in rows}):
        one, py_one = find(1, batch), find(1, batch, "python", "resident")
        for world in sorted({r["world_size"] for r in rows if r["world_size"] > 1}):
            many, py_many = find(world, batch), find(world, batch, "python", "resident")
            if one and many:
                line = (f"scaling at batch {batch}/GPU: {world} GPUs = {many['images_per_sec'] / one['images_per_sec']:.2f}x "
                        f"one GPU ({many['images_per_sec'] / one['images_per_sec'] / world:.2f} x N)")
                if py_one and py_many:
                    line += f"; Python DDP {py_many['images_per_sec'] / py_one['images_per_sec']:.2f}x"
                print(line)
        for r in rows:
            py = find(r["world_size"], batch, "python", "resident")
            if r["batch_size"] == batch and r["mode"] == "defaults" and py:
                print(f"{r['world_size']}x{batch} with libtrain's defaults (--precision auto: {r['precision']}): "
                      f"{r['images_per_sec']:,.0f} img/s = {r['images_per_sec'] / py['images_per_sec']:.2f}x Python DDP, "
                      f"test accuracy {r['test_accuracy']:.4f} vs {py['test_accuracy']:.4f}")
        ddp1 = find(1, batch, mode="cuda_graph+ddp_single_rank")
        if one and ddp1:
            print(f"DDP on one GPU at batch {batch}: {ddp1['images_per_sec']:,.0f} vs {one['images_per_sec']:,.0f} img/s "
                  f"without: costs {100 * (1 - ddp1['images_per_sec'] / one['images_per_sec']):.1f}%")
        for r in rows:
            if r["batch_size"] == batch and r.get("checkpoint_share") is not None and r["mode"] == "cuda_graph+checkpoints":
                print(f"{r['world_size']}x{batch} with a checkpoint per epoch: evaluation {100 * r['eval_share']:.1f}%, "
                      f"checkpoints {100 * r['checkpoint_share']:.1f}% of the time in steps + evaluation + checkpoints")
    if a.results:
        os.makedirs(os.path.dirname(a.results), exist_ok=True)
        with open(a.results, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"appended {len(rows)} rows to {a.results}")


if __name__ == "__main__":
    main()
