#!/usr/bin/env python3
"""Draws `trainctl plot`'s PNG from the JSON-lines metrics files of `train --metrics`.

Usage: plot_metrics.py OUT.png WIDTH HEIGHT METRICS.jsonl [MORE.jsonl ...]
(trainctl plot runs it; needs matplotlib). Three panels, one line per file so runs compare:
loss per epoch (train solid, test dashed), test accuracy per epoch, images/s per logged step.
A resumed run appends to its file; the last line for an epoch or a step wins.
Exit status: 0 written, 1 a file had no metrics or a malformed line (named on stderr), 2 usage.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

DPI = 100


def read(path):
    epochs, steps = {}, {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: expected a JSON object per line, found {line[:60]!r} ({e.msg})")
            if not isinstance(event, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object per line, found {type(event).__name__}")
            if event.get("event") == "epoch" and "epoch" in event:
                epochs[event["epoch"]] = event
            elif event.get("event") == "train" and "step" in event:
                steps[event["step"]] = event
    if not epochs and not steps:
        raise ValueError(f"{path}: expected train --metrics lines (event epoch or train), found none")
    return [epochs[k] for k in sorted(epochs)], [steps[k] for k in sorted(steps)]


def labels_for(paths):
    """The file names, with parent folders added until they differ (run-a/metrics.jsonl)."""
    depth = 1
    while depth < 4:
        labels = [os.sep.join(os.path.abspath(p).split(os.sep)[-depth:]) for p in paths]
        if len(set(labels)) == len(labels):
            return labels
        depth += 1
    return paths


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    out, width, height, paths = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    runs = []
    for path in paths:
        try:
            runs.append(read(path))
        except (OSError, ValueError) as e:
            print(str(e), file=sys.stderr)
            return 1
    fig, (ax_loss, ax_acc, ax_speed) = plt.subplots(1, 3, figsize=(width / DPI, height / DPI), dpi=DPI)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, (epochs, steps)) in enumerate(zip(labels_for(paths), runs)):
        colour = colours[i % len(colours)]
        x = [e["epoch"] for e in epochs]
        if epochs:
            ax_loss.plot(x, [e.get("train_loss") for e in epochs], "o-", color=colour, label=label + " train")
            ax_loss.plot(x, [e.get("test_loss") for e in epochs], "o--", color=colour, label=label + " test")
            ax_acc.plot(x, [e.get("test_accuracy") for e in epochs], "o-", color=colour, label=label)
        if steps:
            ax_speed.plot([s["step"] for s in steps], [s.get("images_per_sec") for s in steps], "-", color=colour,
                          label=label)
    ax_loss.set(title="loss per epoch", xlabel="epoch", ylabel="loss (train solid, test dashed)")
    ax_acc.set(title="test accuracy per epoch", xlabel="epoch", ylabel="accuracy")
    ax_speed.set(title="images/s per logged step", xlabel="step", ylabel="images/s (all ranks)")
    for ax in (ax_loss, ax_acc, ax_speed):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)  # no bbox_inches: the PNG is exactly WIDTH x HEIGHT
    return 0


if __name__ == "__main__":
    sys.exit(main())
