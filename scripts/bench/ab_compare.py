"""Before/after speed of two builds of `train` on the same GPUs, in one invocation: a refactor must
keep the numbers. Runs each WORLDxBATCH config with both builds, alternating (A B A B ...), and
prints the steady images/s of each, their medians and the ratio B/A. The parameters' hashes are
printed too: a refactor that keeps the numbers gives the same params_sha256 for the same run.

usage: python3 scripts/bench/ab_compare.py --a build-base --b build-gpu --data DIR
           [--configs 1x64,2x64,1x512,2x512] [--repeats 2] [--epochs 3] [--program train]
           [-- extra train flags]
--program gru_bench compares the recurrent benchmark model (scripts/bench/gru, a user's program
on the same Trainer; it generates its data, so --data is not passed to it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(build, world, batch, data, epochs, extra, program="train"):
    train = os.path.join(build, "bin", program)
    data_flags = ["--data", data] if program == "train" else []
    cmd = [train, "--device", "cuda"] + data_flags + ["--epochs", str(epochs), "--batch-size", str(batch),
           "--threads", "4", "--log-interval", "1000000", "--precision", "fp32"] + extra
    if world > 1:
        cmd = [os.path.join(build, "bin", "trainctl"), "local", "--nproc", str(world), "--no-prefix", "--"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    done = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{") and '"done"' in l]
    if p.returncode != 0 or not done:
        sys.stderr.write(p.stderr[-2000:])
        return None
    step = [l for l in p.stderr.splitlines() if "training step:" in l]
    return done[-1]["images_per_sec_steady"], done[-1]["params_sha256"], (step[-1].split("training step: ")[-1] if step else "?")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--a", required=True, help="the build before (its bin/train)")
    p.add_argument("--b", required=True, help="the build after")
    p.add_argument("--data", required=True)
    p.add_argument("--configs", default="1x64,2x64,1x512,2x512")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--program", default="train", help="the program of both builds' bin/: train or gru_bench")
    a, extra = p.parse_known_args()
    extra = [x for x in extra if x != "--"]
    card = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.splitlines()
    print(f"GPU: {card[0] if card else '?'} x {len(card)}; A = {a.a}, B = {a.b}; program {a.program}; "
          f"extra flags: {' '.join(extra)}")
    print(f"{'world x batch':14} {'A img/s':>12} {'B img/s':>12} {'B/A':>7}  same bits  B's step")
    for config in a.configs.split(","):
        world, batch = (int(x) for x in config.split("x"))
        got = {"A": [], "B": []}
        shas = {"A": set(), "B": set()}
        step = ""
        for _ in range(a.repeats):
            for name, build in (("A", a.a), ("B", a.b)):
                r = run(build, world, batch, a.data, a.epochs, extra, a.program)
                if r is None:
                    print(f"  {config}: {name} failed", flush=True)
                    continue
                got[name].append(r[0])
                shas[name].add(r[1])
                if name == "B":
                    step = r[2]
        if not got["A"] or not got["B"]:
            continue
        ma, mb = statistics.median(got["A"]), statistics.median(got["B"])
        same = "yes" if shas["A"] == shas["B"] and len(shas["A"]) == 1 else f"no {sorted(shas['A'])} {sorted(shas['B'])}"
        print(f"{str(world) + ' x ' + str(batch):14} {ma:12,.0f} {mb:12,.0f} {mb / ma:7.3f}  {same}  {step}", flush=True)


if __name__ == "__main__":
    main()
