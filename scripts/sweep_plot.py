#!/usr/bin/env python3
"""Draws `trainctl sweep-report`'s PNG: one bar per combination of a sweep, for one metric.

Usage: sweep_plot.py REPORT.csv OUT.png [METRIC]   (trainctl sweep-report runs it; needs matplotlib)
The CSV is DIR/sweep-report.csv: task, the swept parameters, status, then the metric columns.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    csv_path, png_path = sys.argv[1], sys.argv[2]
    metric = sys.argv[3] if len(sys.argv) == 4 else "test_accuracy"
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{csv_path}: expected one row per task, found none", file=sys.stderr)
        return 1
    header = list(rows[0].keys())
    params = header[1 : header.index("status")]
    labels, values = [], []
    for row in rows:
        labels.append("\n".join(f"{p}={row[p]}" for p in params))
        try:
            values.append(float(row.get(metric) or "nan"))
        except ValueError:
            values.append(float("nan"))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 4.5))
    ax.bar(range(len(rows)), values, color="tab:blue")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per combination ({len(rows)} tasks)")
    for i, v in enumerate(values):
        if v == v:  # not NaN
            ax.annotate(f"{v:.4g}", (i, v), ha="center", va="bottom", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
