"""What the loader benchmarks (loader_peers.py, image_peers.py) share: running one side as a child
process while sampling the memory of its whole process tree (PSS and RSS summed over the process and
its workers, from /proc/PID/smaps_rollup), the machine's name, the results table and the JSON lines.
No torch import here: the harness stays small next to the processes it measures."""
import datetime
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLLUP_FIELDS = {"Rss:": "rss", "Pss:": "pss", "Pss_Anon:": "pss_anon", "Pss_File:": "pss_file",
                 "Pss_Shmem:": "pss_shmem"}


def cpu_model():
    with open("/proc/cpuinfo") as f:
        return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "unknown CPU")


def git_commit():
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def new_run_id():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _children(root):
    """root and all its descendants, from each process's parent in /proc/PID/stat."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            parent[int(d)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    tree, todo = [], [root]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return tree


def tree_cpu_seconds(root):
    """User + system CPU seconds that root and its descendants (every thread) have used so far.
    Taken at two moments by the process itself, it gives the rate per CPU-second, which other
    programs on the same cores disturb much less than the wall-clock rate."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in _children(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


def tree_memory(root):
    """The process tree's memory now, in MB: sums of Rss, Pss, Pss_Anon, Pss_File, Pss_Shmem over root
    and its descendants, and how many processes there were. PSS shares each page among the processes
    that map it, so forked workers' shared pages count once, not once a worker."""
    total = dict.fromkeys(ROLLUP_FIELDS.values(), 0.0)
    procs = 0
    for pid in _children(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    key = ROLLUP_FIELDS.get(line.split(None, 1)[0])
                    if key:
                        total[key] += int(line.split()[1]) / 1024.0
            procs += 1
        except (OSError, ValueError):
            continue
    total["procs"] = procs
    return total


class TreeMemorySampler(threading.Thread):
    """Samples tree_memory(pid) every `interval` seconds until stop(); keeps each figure's peak."""

    def __init__(self, pid, interval):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak = dict.fromkeys(list(ROLLUP_FIELDS.values()) + ["procs"], 0.0)
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            now = tree_memory(self.pid)
            if now["procs"]:
                self.samples += 1
                for k, v in now.items():
                    self.peak[k] = max(self.peak[k], v)
            self._stop_event.wait(self.interval)

    def stop(self):
        self._stop_event.set()
        self.join()


def run_measured(cmd, interval=0.05, timeout=1800, env=None):
    """Runs cmd, sampling its process tree's memory. Returns (the last JSON line of its stdout or
    None, the memory peaks in MB, the exit code, the tail of its stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = TreeMemorySampler(proc.pid, interval)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n(killed after {timeout} s)"
    sampler.stop()
    row = None
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                pass
    peaks = {f"{k}_peak_mb": round(v, 1) for k, v in sampler.peak.items() if k != "procs"}
    peaks["procs"] = int(sampler.peak["procs"])
    peaks["memory_samples"] = sampler.samples
    return row, peaks, proc.returncode, "\n".join(err.strip().splitlines()[-8:])


def measured_rounds(rounds, sides, command_of, tool):
    """Every side once a round, in turn (the order reversed every other round), each run measured
    (run_measured): yields (round, side, row) with the row's memory peaks, `impl` and `round` added,
    a pause after each (wait_for_quiet). A run that fails or prints no JSON line is said (as `tool`)
    and skipped."""
    for rnd in range(rounds):
        for impl in (sides if rnd % 2 == 0 else sides[::-1]):
            cmd = command_of(impl)
            row, peaks, rc, err = run_measured(cmd)
            if rc != 0 or row is None:
                print(f"{tool}: {impl} failed (exit {rc}): expected one JSON line, found none.\n{err}\n"
                      f"Hint: run the command alone: {' '.join(cmd)}", file=sys.stderr)
                continue
            row.update(peaks, impl=impl, round=rnd + 1)  # loader_bench says "libtrain" for every data kind
            yield rnd + 1, impl, row
            wait_for_quiet()


def checksums_match(row, ref, rel=1e-9):
    """True when row's checksums equal ref's: the targets' exactly, the inputs' within rel (the
    float64 sums are added in the same order, so they are usually equal bit for bit)."""
    a, b = row["checksum_inputs"], ref["checksum_inputs"]
    return row["checksum_targets"] == ref["checksum_targets"] and abs(a - b) <= rel * max(1.0, abs(b))


def best_rows(rows, rate_key):
    """For each impl, the row with its highest rate, with the highest memory peaks over all its runs
    (the conservative figure), its number of runs and its best rate per CPU-second. Returns {impl: row} in the order impls first
    appear."""
    best = {}
    for impl in dict.fromkeys(r["impl"] for r in rows):
        mine = [r for r in rows if r["impl"] == impl]
        top = dict(max(mine, key=lambda r: r[rate_key]))
        for k in [k for k in top if k.endswith("_peak_mb")]:
            top[k] = max(r[k] for r in mine)
        top["runs"] = len(mine)
        top["best_samples_per_cpu_second"] = max(r.get("samples_per_cpu_second", 0) for r in mine)
        best[impl] = top
    return best


def print_table(best, rate_key, rate_unit, ours="libtrain", per_core=None):
    """The table of each impl's best rate and memory peaks, then each ratio ours/peer (rate: higher
    is better for ours; memory: lower is) and the ratio against the strongest peer."""
    cols = f"{'impl':<22} {rate_unit:>12}" + (f" {'/core':>8}" if per_core else "") + f" {'/CPU-s':>9}" + \
        f" {'PSS MB':>9} {'anon':>8} {'file':>8} {'RSS sum':>9} {'procs':>5} {'runs':>4}"
    print(cols)
    for impl, r in best.items():
        print(f"{impl:<22} {r[rate_key]:>12,.0f}" + (f" {r[rate_key] / per_core:>8,.0f}" if per_core else "") +
              f" {r.get('best_samples_per_cpu_second', 0):>9,.0f}"
              f" {r['pss_peak_mb']:>9.1f} {r['pss_anon_peak_mb']:>8.1f} {r['pss_file_peak_mb']:>8.1f}"
              f" {r['rss_peak_mb']:>9.1f} {r['procs']:>5} {r['runs']:>4}")
    if ours not in best:
        return {}
    o, ratios = best[ours], {}
    for impl, r in best.items():
        if impl.startswith(ours):  # ours and its variants (libtrain_shards) are not peers
            continue
        ratios[impl] = dict(rate=o[rate_key] / r[rate_key], pss=o["pss_peak_mb"] / r["pss_peak_mb"],
                            pss_anon=o["pss_anon_peak_mb"] / max(r["pss_anon_peak_mb"], 1e-9),
                            per_cpu_second=o.get("best_samples_per_cpu_second", 0) /
                            max(r.get("best_samples_per_cpu_second", 0), 1e-9))
        print(f"{ours}/{impl}: {rate_unit} {ratios[impl]['rate']:.2f}x (per CPU-second "
              f"{ratios[impl]['per_cpu_second']:.2f}x), PSS {ratios[impl]['pss']:.2f}x, "
              f"anonymous PSS {ratios[impl]['pss_anon']:.2f}x")
    if ratios:
        strongest = max(ratios, key=lambda i: best[i][rate_key])
        print(f"against the strongest peer ({strongest}): {rate_unit} {ratios[strongest]['rate']:.2f}x, "
              f"PSS {ratios[strongest]['pss']:.2f}x")
    return ratios


def append_results(path, rows):
    if not path:
        return
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    print(f"appended {len(rows)} rows to {path}", file=sys.stderr)


def wait_for_quiet(seconds=0.5):
    """A short pause between runs, so that one side's exit (page frees, reaped workers) doesn't
    fall into the next side's first epoch."""
    time.sleep(seconds)
