"""libtrain's loader (build/bin/loader_bench) against Python's loaders on the same files, the same
number of workers, batch size and epochs: PyTorch's DataLoader, torchdata's StatefulDataLoader and
SPDL's thread-pool pipeline. Not a test: it prints a table and appends JSON lines to results.jsonl.

Each side runs as its own process, in turn, ROUNDS times; the harness samples the memory of the
process and its workers (PSS and RSS summed, peak kept), the same way for every side. Every side
reads DistributedSampler(num_replicas=1, rank=0, shuffle=True, seed)'s order, so the batches are the
same, and each peer's checksum (the inputs' float64 sum, the targets weighted by batch number) must
equal libtrain's before its rate is reported.

  loader_peers.py --npy DIR [--bench build-bench/bin/loader_bench] [--workers N] [--rounds 2]
  loader_peers.py --tokens FILE --seq-len 1024 --batch-size 32
  loader_peers.py --run-peer dataloader --npy DIR ...   (one peer in this process: one JSON line)
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_harness as H  # noqa: E402

PEERS = ["libtrain", "dataloader", "stateful_dataloader", "spdl"]
PEER_MODULES = {"dataloader": "torch", "stateful_dataloader": "torchdata.stateful_dataloader", "spdl": "spdl.pipeline"}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # NpyDataset's default normalization of uint8 inputs


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--npy", default="", help="a folder with train_x.npy and train_y.npy")
    p.add_argument("--tokens", default="", help="a raw uint16 token file, read as windows of --seq-len")
    p.add_argument("--seq-len", type=int, default=0)
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="workers of every side (default: the cores)")
    p.add_argument("--prefetch", type=int, default=0,
                   help="batches read ahead; 0: 2 per worker (DataLoader's default prefetch_factor)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2, help="samples/s counts the epochs after the first")
    p.add_argument("--max-batches", type=int, default=0, help="at most this many batches per epoch; 0: all")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, or cuda (pinned batches copied to the GPU)")
    p.add_argument("--peers", default=",".join(PEERS), help="sides to run, in this order each round")
    p.add_argument("--rounds", type=int, default=2, help="each side runs once a round, in turn")
    p.add_argument("--bench", default=os.path.join(H.REPO, "build-bench", "bin", "loader_bench"))
    p.add_argument("--results", default=os.path.join(H.REPO, "docs", "benchmarks", "results.jsonl"),
                   help="append the best rows here ('' for nowhere)")
    p.add_argument("--note", default="", help="a note for the JSON lines (the command, the machine's load)")
    p.add_argument("--run-peer", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if bool(a.npy) == bool(a.tokens):
        p.error(f"expected exactly one of --npy DIR and --tokens FILE, found {'both' if a.npy else 'neither'}. "
                "Hint: scripts/bench/loader_bench.sh writes both kinds of files.")
    if a.tokens and a.seq_len < 1:
        p.error(f"--tokens {a.tokens}: expected --seq-len >= 1, found {a.seq_len}. Hint: e.g. --seq-len 1024.")
    a.prefetch = a.prefetch or 2 * a.workers
    return a


# ---- one peer, in this process ----

def make_dataset(a):
    """The map-style Dataset every peer reads: an .npy pair (uint8 inputs normalized with MNIST's
    mean and std in float32, as NpyDataset does) or a token file's windows (int64 input and target).
    Files are memory-mapped on first access, in the process that reads them (a pickled memmap would
    copy its data into each worker)."""
    import numpy as np
    import torch
    from torch.utils.data import Dataset

    class NpyPairs(Dataset):
        def __init__(self, folder):
            self.folder, self.x, self.y = folder, None, None
            self.n = np.load(os.path.join(folder, "train_y.npy"), mmap_mode="r").shape[0]

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if self.x is None:
                self.x = np.load(os.path.join(self.folder, "train_x.npy"), mmap_mode="r")
                self.y = np.load(os.path.join(self.folder, "train_y.npy"), mmap_mode="r")
            x = torch.from_numpy(np.array(self.x[i]))
            if x.dtype == torch.uint8:
                x = x.float().div_(255).sub_(MNIST_MEAN).div_(MNIST_STD)
            return x, torch.tensor(int(self.y[i]), dtype=torch.int64)

    class TokenWindows(Dataset):
        def __init__(self, path, seq_len):
            self.path, self.seq_len, self.tokens = path, seq_len, None
            self.n = (os.path.getsize(path) // 2 - 1) // seq_len

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            if self.tokens is None:
                self.tokens = np.memmap(self.path, dtype=np.uint16, mode="r")
            s = i * self.seq_len
            w = torch.from_numpy(self.tokens[s:s + self.seq_len + 1].astype(np.int64))
            return w[:-1], w[1:]

    return NpyPairs(a.npy) if a.npy else TokenWindows(a.tokens, a.seq_len)


def torch_epochs(a, ds, dev, stateful):
    """DataLoader (or StatefulDataLoader) with num_workers = --workers, persistent workers, pinned
    memory on a GPU, DistributedSampler's shuffled order; yields each epoch's batch iterator."""
    from torch.utils.data import DataLoader, DistributedSampler
    cls = DataLoader
    if stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader as cls
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=a.seed)
    loader = cls(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers, pin_memory=dev.type == "cuda",
                 persistent_workers=True, prefetch_factor=max(1, a.prefetch // a.workers))
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        yield iter(loader)


def spdl_epochs(a, ds, dev):
    """SPDL's thread-pool pipeline: the source is the epoch's batches of sampler indices (as its
    get_pytorch_dataloader cuts them), one pipe fetches and collates a batch (concurrency = --workers,
    output in input order, so the batches are the others'), then a sink; one pipeline per epoch."""
    from spdl.pipeline import PipelineBuilder
    from torch.utils.data import BatchSampler, DistributedSampler, default_collate
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=a.seed)
    pin = dev.type == "cuda"

    def fetch(indices):
        x, y = default_collate([ds[i] for i in indices])
        return (x.pin_memory(), y.pin_memory()) if pin else (x, y)

    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        batches = list(BatchSampler(sampler, a.batch_size, drop_last=False))
        pipeline = (PipelineBuilder().add_source(batches)
                    .pipe(fetch, concurrency=a.workers, output_order="input")
                    .add_sink(max(1, a.prefetch - a.workers))
                    .build(num_threads=a.workers))
        with pipeline.auto_stop():
            yield pipeline.get_iterator()


def run_peer(a):
    """Reads the epochs with peer a.run_peer and prints one JSON line, as loader_bench does."""
    import torch
    torch.set_num_threads(1)  # the consumer's checksum is the main thread's only op, as in loader_bench
    dev = torch.device("cuda" if a.device == "cuda" else "cpu")
    ds = make_dataset(a)
    acc_in = torch.zeros((), dtype=torch.float64, device=dev)
    acc_t = torch.zeros((), dtype=torch.int64, device=dev)
    batches = samples = first_samples = 0
    t0 = time.perf_counter()
    t1 = t0
    epochs = spdl_epochs(a, ds, dev) if a.run_peer == "spdl" else torch_epochs(a, ds, dev, a.run_peer == "stateful_dataloader")
    for e, it in enumerate(epochs):
        for i, (x, y) in enumerate(it):
            if a.max_batches and i == a.max_batches:
                break
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            batches += 1
            acc_in += torch.sum(x, dtype=torch.float64)
            acc_t += y.to(torch.int64).sum().mul_(batches)
            samples += x.shape[0]
        if e == 0:
            t1, first_samples, cpu1 = time.perf_counter(), samples, H.tree_cpu_seconds(os.getpid())
    checksum_inputs = acc_in.item()
    t2, cpu2 = time.perf_counter(), H.tree_cpu_seconds(os.getpid())
    steady = a.epochs > 1 and t2 > t1
    print(H.json.dumps(dict(
        impl=a.run_peer, data="npy" if a.npy else "tokens", dataset_samples=len(ds), device=str(dev),
        pinned=dev.type == "cuda", workers=a.workers, prefetch=a.prefetch, batch_size=a.batch_size, epochs=a.epochs,
        seed=a.seed, batches=batches, samples=samples, seconds=t2 - t0, seconds_first_epoch=t1 - t0,
        samples_per_sec=(samples - first_samples) / (t2 - t1) if steady else samples / (t2 - t0),
        samples_per_sec_whole=samples / (t2 - t0), cpu_seconds_steady=cpu2 - cpu1,
        samples_per_cpu_second=(samples - first_samples) / max(cpu2 - cpu1, 1e-9), checksum_inputs=checksum_inputs,
        checksum_targets=int(acc_t.item()), torch=torch.__version__)), flush=True)


# ---- the harness ----

def side_command(a, impl):
    data = ["--npy", a.npy] if a.npy else ["--tokens", a.tokens, "--seq-len", str(a.seq_len)]
    common = data + ["--workers", str(a.workers), "--prefetch", str(a.prefetch), "--batch-size", str(a.batch_size),
                     "--epochs", str(a.epochs), "--max-batches", str(a.max_batches), "--seed", str(a.seed),
                     "--device", a.device]
    if impl == "libtrain":
        return [a.bench] + common
    return [sys.executable, os.path.abspath(__file__), "--run-peer", impl] + common


def available_sides(a):
    """The sides to run, each peer checked for its Python package (a missing one is skipped, said)."""
    import importlib.util
    sides = []
    for impl in a.peers.split(","):
        if impl == "libtrain":
            if not os.access(a.bench, os.X_OK):
                sys.exit(f"loader_peers: {a.bench}: expected the loader_bench program, found none. Hint: "
                         "cmake --build build-bench --target loader_bench, or pass --bench PATH.")
        elif impl not in PEER_MODULES:
            sys.exit(f"loader_peers --peers: expected names from {','.join(PEERS)}, found '{impl}'. Hint: "
                     "leave --peers out for all of them.")
        elif importlib.util.find_spec(PEER_MODULES[impl].split(".")[0]) is None:
            print(f"loader_peers: skipping {impl}: Python package {PEER_MODULES[impl].split('.')[0]} is not "
                  f"installed in {sys.executable}. Hint: scripts/bench/peers-setup.sh installs the peers.",
                  file=sys.stderr)
            continue
        sides.append(impl)
    return sides


def run_rounds(a, sides):
    """Every side once a round, in turn (the order reversed every other round); each run's row
    with its memory peaks. A peer whose checksum differs from libtrain's is reported and dropped."""
    rows, ref = [], None
    for rnd, impl, row in H.measured_rounds(a.rounds, sides, lambda impl: side_command(a, impl), "loader_peers"):
        ref = ref or row
        if not H.checksums_match(row, ref):
            print(f"loader_peers: {impl}'s checksum differs from {ref['impl']}'s: inputs {row['checksum_inputs']!r} "
                  f"against {ref['checksum_inputs']!r}, targets {row['checksum_targets']} against "
                  f"{ref['checksum_targets']}: it read other batches; its numbers are left out. Hint: "
                  "the same files, --seed and --batch-size on every side.", file=sys.stderr)
            continue
        rows.append(row)
        print(f"  round {rnd} {impl:<20} {row['samples_per_sec']:>12,.0f} samples/s  "
              f"PSS {row['pss_peak_mb']:.0f} MB  RSS sum {row['rss_peak_mb']:.0f} MB  ({row['procs']} processes)",
              file=sys.stderr, flush=True)
    return rows


def main():
    sys.stdout.reconfigure(line_buffering=True)  # the table after the rounds' lines, through a pipe too
    a = parse_args()
    if a.run_peer:
        return run_peer(a)
    sides = available_sides(a)
    what = f"npy {a.npy}" if a.npy else f"tokens {a.tokens} (seq_len {a.seq_len})"
    print(f"loader benchmark: {what}; {a.workers} workers, {a.prefetch} batches ahead, batch {a.batch_size}, "
          f"{a.epochs} epochs, device {a.device}, {a.rounds} rounds of {','.join(sides)}; {H.cpu_model()}, "
          f"{os.cpu_count()} cores", flush=True)
    if a.device != "cuda":
        print("pin_memory is off: page-locked memory needs CUDA, and this run has no GPU (every side the same).")
    rows = run_rounds(a, sides)
    if not rows:
        sys.exit("loader_peers: no side produced a verified row. Hint: see the messages above.")
    print(f"checksums verified: every row's batches match {rows[0]['impl']}'s "
          f"(inputs {rows[0]['checksum_inputs']:.10g}, targets {rows[0]['checksum_targets']})")
    best = H.best_rows(rows, "samples_per_sec")
    ratios = H.print_table(best, "samples_per_sec", "samples/s")
    run_id, commit = H.new_run_id(), H.git_commit()
    keep = ["impl", "data", "dataset_samples", "device", "pinned", "workers", "prefetch", "batch_size", "epochs",
            "batches", "samples", "samples_per_sec", "samples_per_sec_whole", "best_samples_per_cpu_second", "seconds",
            "pss_peak_mb", "pss_anon_peak_mb", "pss_file_peak_mb", "rss_peak_mb", "procs", "runs", "checksum_inputs",
            "checksum_targets", "peak_rss_mb", "rss_anon_mb", "rss_file_mb"]
    out = [dict({k: r[k] for k in keep if k in r}, workload=f"loader-{r['data']}", cpu=H.cpu_model(),
                ratio_libtrain_over=ratios.get(impl), run_id=run_id, date=run_id[:4] + "-" + run_id[4:6] + "-" + run_id[6:8],
                commit=commit, note=a.note) for impl, r in best.items()]
    H.append_results(a.results, out)


if __name__ == "__main__":
    main()
