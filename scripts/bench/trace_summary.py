"""Sums the GPU kernels (and memory copies/sets) of chrome traces written by a torch profiler
(`train --profile DIR`, `peers.py --profile DIR`), by name, per traced step, and compares traces
side by side: which kernels one step runs that another doesn't, and where the time goes.

  python3 scripts/bench/trace_summary.py A.json:STEPS B.json:STEPS [--top 30]

STEPS is how many steps the trace holds (train's --profile-steps FROM:TO holds TO - FROM + 1;
peers.py's --steps). --ops sums the host's operator calls instead (nested calls count in each
level). Prints, per trace, the GPU busy time per step, and one table of the kernels
by time per step in each trace (microseconds), largest difference first. --idle US lists instead
where each trace's GPU sat idle for US microseconds or more (no kernel, copy or set on any
stream) and what the host ran meanwhile: an epoch's boundary (--profile-steps across it), a stall.
"""
import argparse
import collections
import json
import re

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def short(name, width=90):
    """Kernel names with their template arguments folded, so that the same kernel matches."""
    name = re.sub(r"<.*>", "<...>", name)
    return name if len(name) <= width else name[: width - 3] + "..."


def read_events(spec):
    """A trace's path, its step count (TRACE.json:STEPS) and its events."""
    path, _, steps = spec.rpartition(":")
    if not path:
        path, steps = steps, "1"
    with open(path) as f:
        trace = json.load(f)
    return path, max(1, int(steps)), trace["traceEvents"] if isinstance(trace, dict) else trace


def load(spec, cats):
    """path, steps, {kernel: (us, calls) per step}, busy us per step."""
    path, n, events = read_events(spec)
    return (path, n) + summarize(events, n, cats)


def summarize(events, n, cats):
    per = collections.defaultdict(lambda: [0.0, 0])
    busy = 0.0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in cats:
            continue
        d = float(e.get("dur", 0))
        k = per[short(e.get("name", "?"))]
        k[0] += d
        k[1] += 1
        busy += d
    return {k: (v[0] / n, v[1] / n) for k, v in per.items()}, busy / n


def span_per_step(events, n, cats):
    """Microseconds from the first to the last event of `cats`, per traced step."""
    times = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
             if e.get("ph") == "X" and e.get("cat") in cats]
    if not times:
        return 0.0
    return (max(t[1] for t in times) - min(t[0] for t in times)) / n


def idle_spans(events, min_us):
    """(idle us, start, end, the GPU event after) where no GPU event of any stream ran for min_us or more."""
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS), key=lambda e: float(e["ts"]))
    spans, busy_to = [], None
    for e in gpu:
        t0 = float(e["ts"])
        if busy_to is not None and t0 - busy_to >= min_us:
            spans.append((t0 - busy_to, busy_to, t0, short(e.get("name", "?"), 60)))
        t1 = t0 + float(e.get("dur", 0))
        busy_to = t1 if busy_to is None else max(busy_to, t1)
    return spans


def host_during(events, start, end, top=6):
    """The host's operators and annotations that overlap [start, end), longest overlap first."""
    rows = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("cpu_op", "user_annotation"):
            continue
        t0, t1 = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        inside = min(t1, end) - max(t0, start)
        if inside > 0:
            rows.append((inside, short(e.get("name", "?"), 40)))
    rows.sort(reverse=True)
    return ", ".join(f"{name} {us:.0f}" for us, name in rows[:top])


def print_idle(path, events, min_us, top):
    spans = idle_spans(events, min_us)
    print(f"{path}: {len(spans)} idle span(s) of {min_us:g} us or more, {sum(s[0] for s in spans):.0f} us in all")
    for us, start, end, after in sorted(spans, reverse=True)[:top]:
        print(f"  {us:8.0f} us idle before {after}; host: {host_during(events, start, end)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+", help="TRACE.json:STEPS")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--ops", action="store_true", help="sum the host's operator calls (cpu_op) instead of GPU work: "
                   "which ATen ops each step calls, on any device")
    p.add_argument("--span", action="store_true", help="also the time from the first to the last event, per step "
                   "(busy plus idle; on one stream, the step's GPU time)")
    p.add_argument("--idle", type=float, metavar="US", help="list the GPU's idle spans of US microseconds or more "
                   "and the host's work in each, longest first (--top of them per trace)")
    a = p.parse_args()
    if a.idle is not None:
        for spec in a.traces:
            path, _, events = read_events(spec)
            print_idle(path, events, a.idle, a.top)
        return
    cats = ("cpu_op",) if a.ops else GPU_CATS
    runs = []
    for spec in a.traces:  # each trace read once
        path, n, events = read_events(spec)
        per, busy = summarize(events, n, cats)
        runs.append((path, n, per, busy))
        span = f", span {span_per_step(events, n, cats):.1f} us per step (first to last)" if a.span else ""
        print(f"{path}: {n} step(s), {'host op' if a.ops else 'GPU busy'} {busy:.1f} us per step{span}")
    names = set().union(*(r[2].keys() for r in runs))
    zero = (0.0, 0.0)

    def spread(k):
        v = [r[2].get(k, zero)[0] for r in runs]
        return max(v) - min(v)

    head = " | ".join(f"trace {i + 1} us (calls)" for i in range(len(runs)))
    print(f"\n{head} | kernel")
    for k in sorted(names, key=spread, reverse=True)[: a.top]:
        cells = " | ".join(f"{r[2].get(k, zero)[0]:9.1f} ({r[2].get(k, zero)[1]:5.1f})" for r in runs)
        print(f"{cells} | {k}")


if __name__ == "__main__":
    main()
