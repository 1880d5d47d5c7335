"""The image loaders' CPU speed (issue #49): libtrain's image dataset through its loader
(build/bin/loader_bench --images/--shards) against PyTorch's DataLoader with torchvision's ImageFolder,
WebDataset's loader on the same images as tar shards, and SPDL's thread pool on the folder. Not a test.

--make DIR writes the images first: ImageNet-sized JPEGs (about 500x375, quality 90) cut from the
photographs shipped with scikit-image (random crops, scales and flips) into DIR/train/<class>/, and
the same images as WebDataset shards (DIR/shards/train-NNNNNN.tar, in the folder's order: classes
sorted, then file names). Every side decodes, random-resized-crops to 224 (antialiased), flips at
random and normalizes (ImageNet's mean and std) into float32 [B, 3, 224, 224] batches, with the same
number of workers (the cores), batch size and epochs. Each side runs as its own process, in turn;
the harness samples the memory (PSS summed over the process and its workers) of each. Checks before
the figures: every side read each image once an epoch (the sample count and the labels' sum), the
sides in DistributedSampler's order the same labels in the same batches, and the pixels' mean near.

  image_peers.py --make /tmp/images --count 2000         # writes the images, then runs every side
  image_peers.py --data /tmp/images [--workers N] [--peers dataloader,webdataset,spdl]
  image_peers.py --run-peer dataloader --data DIR ...     (one peer in this process: one JSON line)
"""
import argparse
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_harness as H  # noqa: E402

PEERS = ["libtrain", "libtrain_shards", "libtrain_full_decode", "dataloader", "webdataset", "spdl"]
PEER_MODULES = {"dataloader": "torchvision", "webdataset": "webdataset", "spdl": "spdl"}
# Sides that read DistributedSampler's order over the folder (libtrain_full_decode: the folder, every
# JPEG decoded whole, without the reduced-DCT decode, as the Python peers decode).
ORDERED = {"libtrain", "libtrain_full_decode", "dataloader", "spdl"}
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png", "motorcycle_left.png",
          "motorcycle_right.png", "retina.jpg", "rocket.jpg"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--make", default="", help="write the images into this folder first (kept if already there)")
    p.add_argument("--data", default="", help="a folder written by --make (train/ and shards/)")
    p.add_argument("--count", type=int, default=2000, help="with --make: how many images")
    p.add_argument("--classes", type=int, default=10, help="with --make: how many class folders")
    p.add_argument("--shards", type=int, default=32, help="with --make: tar shards (at least the workers of a side)")
    p.add_argument("--photos", default="", help="with --make: the photographs' folder (default: scikit-image's data)")
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="workers of every side (default: the cores)")
    p.add_argument("--prefetch", type=int, default=0, help="batches read ahead; 0: 2 per worker (DataLoader's default)")
    p.add_argument("--batch-size", type=int, default=32, help="the ImageNet recipe's 32 a GPU")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=2, help="images/s counts the epochs after the first")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--wds-shuffle", type=int, default=1000,
                   help="WebDataset's sample shuffle buffer (its ImageNet recipe's), 0: none")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (pinned batches copied to the GPU)")
    p.add_argument("--peers", default=",".join(PEERS), help="sides to run, in this order each round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bench", default=os.path.join(H.REPO, "build-bench", "bin", "loader_bench"))
    p.add_argument("--results", default=os.path.join(H.REPO, "docs", "benchmarks", "results.jsonl"),
                   help="append the best rows here ('' for nowhere)")
    p.add_argument("--note", default="")
    p.add_argument("--only-make", action="store_true", help="with --make: write the images and stop")
    p.add_argument("--run-peer", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.data = a.data or a.make
    if not a.data:
        p.error("expected --data DIR (images written by --make) or --make DIR, found neither. "
                "Hint: image_peers.py --make /tmp/images writes 2,000 JPEGs and their shards, then runs.")
    a.prefetch = a.prefetch or 2 * a.workers
    return a


# ---- the images ----

def cut_photo(photo, rng, size):
    """A random crop of `photo` (a PIL image) at a random scale, resized to `size` (w, h), flipped
    at random: a new photograph-like image, not a copy of another."""
    from PIL import Image
    w, h = size
    # The crop covers 35-100% of the photo's largest box of the output's aspect ratio.
    fit = min(photo.width / w, photo.height / h)
    s = fit * rng.uniform(0.35 ** 0.5, 1.0)
    cw, ch = max(8, int(w * s)), max(8, int(h * s))
    x0, y0 = int(rng.integers(0, photo.width - cw + 1)), int(rng.integers(0, photo.height - ch + 1))
    img = photo.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.BICUBIC)
    return img.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else img


def photo_folder(photos):
    """Where the photographs are: `photos`, else scikit-image's data folder."""
    if photos:
        return photos
    try:
        import skimage
    except ImportError:
        sys.exit("image_peers --make: expected scikit-image (its data folder holds the photographs the images are "
                 "cut from) or --photos DIR, found neither. Hint: scripts/bench/peers-setup.sh installs it; on a "
                 "machine without a network, copy .venv/lib/python3.11/site-packages/skimage/data there and pass "
                 "--photos (PHOTOS= for image_bench.sh).")
    return os.path.join(os.path.dirname(skimage.__file__), "data")


def write_shards(out, files, per_shard):
    """out/shards/train-NNNNNN.tar: KEY.jpg and KEY.cls of `files` in their order, per_shard samples a
    shard, by webdataset's ShardWriter, or where webdataset is missing by tarfile in ShardWriter's
    layout (the same members, the label as its decimal text)."""
    import io
    import tarfile
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    for old in glob.glob(os.path.join(out, "shards", "train-*.tar")):
        os.remove(old)
    samples = [(f"{cls}_{os.path.basename(path)[:-4]}", path, c) for cls, path, c in files]
    try:
        import webdataset as wds
    except ImportError:
        print("image_peers: webdataset is not installed: the shards are written by tarfile in ShardWriter's layout")
        for n in range(0, len(samples), per_shard):
            with tarfile.open(os.path.join(out, "shards", f"train-{n // per_shard:06d}.tar"), "w") as tar:
                for key, path, c in samples[n:n + per_shard]:
                    for name, data in [(key + ".jpg", open(path, "rb").read()), (key + ".cls", str(c).encode())]:
                        info = tarfile.TarInfo(name)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
        return
    with wds.ShardWriter(os.path.join(out, "shards", "train-%06d.tar"), maxcount=per_shard, verbose=0) as w:
        for key, path, c in samples:
            w.write({"__key__": key, "jpg": open(path, "rb").read(), "cls": c})


def make_images(out, count, classes, shards, seed=0, photos=""):
    """Writes out/train/class_NN/img_NNNNNN.jpg (count JPEGs at quality 90, about 500x375, landscape
    or portrait) and out/shards/train-NNNNNN.tar (the same bytes as WebDataset's ShardWriter writes
    them: KEY.jpg and KEY.cls, in the folder's order). Kept when out/done says the same sizes."""
    import io
    import numpy as np
    from PIL import Image
    stamp = f"{count} images, {classes} classes, {shards} shards, seed {seed}\n"
    done = os.path.join(out, "done")
    if os.path.exists(done) and open(done).read() == stamp:
        return
    folder = photo_folder(photos)
    pictures = [Image.open(os.path.join(folder, p)).convert("RGB") for p in PHOTOS]
    rng = np.random.default_rng(seed)
    files = []
    for i in range(count):
        c = i % classes
        w = int(rng.integers(450, 521))
        size = (w, w * 3 // 4) if rng.random() < 0.75 else (w * 3 // 4, w)
        img = cut_photo(pictures[int(rng.integers(0, len(pictures)))], rng, size)
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        path = os.path.join(out, "train", f"class_{c:02d}", f"img_{i:06d}.jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        files.append((f"class_{c:02d}", path, c))
    files.sort()  # ImageFolder's order: classes sorted, then file names
    write_shards(out, files, -(-count // shards))
    with open(done, "w") as f:
        f.write(stamp)
    total = sum(os.path.getsize(p) for _, p, _ in files)
    print(f"wrote {count} JPEGs ({total / 2**20:.1f} MiB, {total / count / 1024:.1f} KiB each) in {classes} class "
          f"folders under {out}/train and {len(glob.glob(os.path.join(out, 'shards', '*.tar')))} shards", flush=True)


def shard_files(data):
    return sorted(glob.glob(os.path.join(data, "shards", "train-*.tar")))


def shard_spec(data):
    """The shards as a brace range, as WebDataset writes them: DIR/train-{000000..000031}.tar."""
    names = [os.path.basename(f)[len("train-"):-len(".tar")] for f in shard_files(data)]
    return os.path.join(data, "shards", f"train-{{{names[0]}..{names[-1]}}}.tar")


# ---- one peer, in this process ----

def train_transform(size):
    """torchvision's ImageNet training transform (references/classification), v2 API."""
    import torch
    from torchvision.transforms import v2
    return v2.Compose([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(),
                       v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def dataloader_epochs(a, dev):
    """DataLoader over torchvision's ImageFolder, num_workers = --workers, persistent workers, pinned
    on a GPU, DistributedSampler's order."""
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(os.path.join(a.data, "train"), transform=train_transform(a.image_size))
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=a.seed)
    loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers,
                        pin_memory=dev.type == "cuda", persistent_workers=True,
                        prefetch_factor=max(1, a.prefetch // a.workers))
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        yield iter(loader)


def webdataset_epochs(a, dev):
    """WebDataset's recipe: shards split among the DataLoader's workers, a sample shuffle buffer,
    decode("pil"), to_tuple, the same transform, batched in the workers."""
    import webdataset as wds
    from torch.utils.data import DataLoader
    ds = (wds.WebDataset(shard_files(a.data), shardshuffle=len(shard_files(a.data)), seed=a.seed)
          .shuffle(a.wds_shuffle).decode("pil").to_tuple("jpg", "cls")
          .map_tuple(train_transform(a.image_size), int).batched(a.batch_size, partial=True))
    loader = DataLoader(ds, batch_size=None, num_workers=a.workers, pin_memory=dev.type == "cuda",
                        persistent_workers=True, prefetch_factor=max(1, a.prefetch // a.workers))
    for _ in range(a.epochs):
        yield iter(loader)


def spdl_epochs(a, dev):
    """SPDL's thread pool on the folder, in its DataLoader's shape: the source is the epoch's sample
    indices (DistributedSampler's order), one pipe decodes and transforms an image (concurrency =
    --workers, output in input order), aggregate(batch), one pipe collates, a sink. The decode is
    PIL's (it releases the GIL), as torchvision's ImageFolder does: spdl.io's decoder needs FFmpeg's
    libraries, which these machines don't have."""
    import torch
    from PIL import Image
    from spdl.pipeline import PipelineBuilder
    from torch.utils.data import DistributedSampler
    from torchvision.datasets import ImageFolder
    samples = ImageFolder(os.path.join(a.data, "train")).samples
    sampler = DistributedSampler(samples, num_replicas=1, rank=0, shuffle=True, seed=a.seed)
    transform = train_transform(a.image_size)

    def decode(i):
        path, label = samples[i]
        with open(path, "rb") as f:
            return transform(Image.open(f).convert("RGB")), label

    def collate(items):
        x, y = torch.stack([t for t, _ in items]), torch.tensor([l for _, l in items])
        return (x.pin_memory(), y.pin_memory()) if dev.type == "cuda" else (x, y)

    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        pipeline = (PipelineBuilder().add_source(list(sampler))
                    .pipe(decode, concurrency=a.workers, output_order="input")
                    .aggregate(a.batch_size).pipe(collate)
                    .add_sink(a.prefetch).build(num_threads=a.workers))
        with pipeline.auto_stop():
            yield pipeline.get_iterator()


def run_peer(a):
    """Reads the epochs with peer a.run_peer; prints one JSON line, as loader_bench does."""
    import torch
    torch.set_num_threads(1)  # the workers' ops are single-threaded on every side
    dev = torch.device("cuda" if a.device == "cuda" else "cpu")
    epochs = {"dataloader": dataloader_epochs, "webdataset": webdataset_epochs, "spdl": spdl_epochs}[a.run_peer](a, dev)
    acc_in = torch.zeros((), dtype=torch.float64, device=dev)
    acc_t = torch.zeros((), dtype=torch.int64, device=dev)
    label_sum = torch.zeros((), dtype=torch.int64, device=dev)
    batches = samples = first = 0
    t0 = t1 = time.perf_counter()
    for e, it in enumerate(epochs):
        for x, y in it:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            batches += 1
            acc_in += torch.sum(x, dtype=torch.float64)
            acc_t += y.to(torch.int64).sum().mul_(batches)
            label_sum += y.to(torch.int64).sum()
            samples += x.shape[0]
        if e == 0:
            t1, first, cpu1 = time.perf_counter(), samples, H.tree_cpu_seconds(os.getpid())
    checksum_inputs = acc_in.item()
    t2, cpu2 = time.perf_counter(), H.tree_cpu_seconds(os.getpid())
    rate = (samples - first) / (t2 - t1) if a.epochs > 1 else samples / (t2 - t0)
    print(H.json.dumps(dict(
        impl=a.run_peer, data="images", device=str(dev), pinned=dev.type == "cuda", workers=a.workers,
        prefetch=a.prefetch, batch_size=a.batch_size, image_size=a.image_size, epochs=a.epochs, batches=batches,
        samples=samples, seconds=t2 - t0, seconds_first_epoch=t1 - t0, samples_per_sec=rate,
        samples_per_sec_whole=samples / (t2 - t0), cpu_seconds_steady=cpu2 - cpu1,
        samples_per_cpu_second=(samples - first) / max(cpu2 - cpu1, 1e-9), checksum_inputs=checksum_inputs, checksum_targets=int(acc_t.item()),
        label_sum=int(label_sum.item()), pixel_mean=checksum_inputs / (samples * 3 * a.image_size ** 2),
        torch=torch.__version__)), flush=True)


# ---- the harness ----

def side_command(a, impl):
    common = ["--workers", str(a.workers), "--prefetch", str(a.prefetch), "--batch-size", str(a.batch_size),
              "--epochs", str(a.epochs), "--seed", str(a.seed), "--device", a.device]
    if impl == "libtrain":
        return [a.bench, "--images", os.path.join(a.data, "train"), "--image-size", str(a.image_size)] + common
    if impl == "libtrain_shards":
        return [a.bench, "--shards", shard_spec(a.data), "--image-size", str(a.image_size)] + common
    if impl == "libtrain_full_decode":
        return [a.bench, "--images", os.path.join(a.data, "train"), "--image-size", str(a.image_size),
                "--full-decode"] + common
    return [sys.executable, os.path.abspath(__file__), "--run-peer", impl, "--data", a.data,
            "--image-size", str(a.image_size), "--wds-shuffle", str(a.wds_shuffle)] + common


def available_sides(a):
    """The sides to run: a peer without its package, or loader_bench without --images, is skipped, said."""
    import importlib.util
    import subprocess
    sides = []
    for impl in a.peers.split(","):
        if impl.startswith("libtrain"):
            helptext = subprocess.run([a.bench, "--help"], capture_output=True, text=True).stdout \
                if os.access(a.bench, os.X_OK) else ""
            if "--images" not in helptext:
                print(f"image_peers: skipping {impl}: {a.bench} {'has no --images' if helptext else 'is not built'}. "
                      "Hint: cmake --build build-bench --target loader_bench once the image dataset is in the tree.",
                      file=sys.stderr)
                continue
        elif impl not in PEER_MODULES:
            sys.exit(f"image_peers --peers: expected names from {','.join(PEERS)}, found '{impl}'. "
                     "Hint: leave --peers out for all of them.")
        elif importlib.util.find_spec(PEER_MODULES[impl]) is None:
            print(f"image_peers: skipping {impl}: Python package {PEER_MODULES[impl]} is not installed in "
                  f"{sys.executable}. Hint: scripts/bench/peers-setup.sh installs the peers.", file=sys.stderr)
            continue
        sides.append(impl)
    return sides


def verify(row, ref, ordered_ref, folder_row):
    """None when row read what ref read (each image once an epoch, the same labels; for sides in the
    sampler's order the same labels in the same batches; the pixels' mean within 0.1; libtrain's
    shards the very pixels of libtrain's folder, as they hold the same images in the same order and
    the crops are drawn from (seed, epoch, index)), else why not."""
    if row["impl"] == "libtrain_shards" and folder_row and \
            (row["checksum_inputs"], row["checksum_targets"]) != (folder_row["checksum_inputs"], folder_row["checksum_targets"]):
        return (f"checksums {row['checksum_inputs']!r} and {row['checksum_targets']}, libtrain's folder "
                f"{folder_row['checksum_inputs']!r} and {folder_row['checksum_targets']}")
    if (row["samples"], row["label_sum"]) != (ref["samples"], ref["label_sum"]):
        return f"samples {row['samples']} and label sum {row['label_sum']}, {ref['impl']} {ref['samples']} and {ref['label_sum']}"
    if row["impl"] in ORDERED and ordered_ref and row["checksum_targets"] != ordered_ref["checksum_targets"]:
        return f"batches' labels {row['checksum_targets']}, {ordered_ref['impl']}'s {ordered_ref['checksum_targets']}"
    if abs(row["pixel_mean"] - ref["pixel_mean"]) > 0.1:
        return f"pixel mean {row['pixel_mean']:.4f}, {ref['impl']}'s {ref['pixel_mean']:.4f}"
    return None


def run_rounds(a, sides):
    rows, ref, ordered_ref = [], None, None
    for rnd, impl, row in H.measured_rounds(a.rounds, sides, lambda impl: side_command(a, impl), "image_peers"):
        row.setdefault("pixel_mean", row["checksum_inputs"] / (row["samples"] * 3 * a.image_size ** 2))
        ref = ref or row
        if impl in ORDERED:
            ordered_ref = ordered_ref or row
        why = verify(row, ref, ordered_ref, next((r for r in rows if r["impl"] == "libtrain"), None))
        if why:
            print(f"image_peers: {impl} read other data than the others: {why}. Its numbers are left out. "
                  "Hint: the same --data, --seed and --batch-size on every side.", file=sys.stderr)
            continue
        rows.append(row)
        print(f"  round {rnd} {impl:<16} {row['samples_per_sec']:>8,.0f} images/s  PSS {row['pss_peak_mb']:.0f} MB"
              f"  ({row['procs']} processes, pixel mean {row['pixel_mean']:+.4f})", file=sys.stderr, flush=True)
    return rows


GOALS = [  # issue #49's CPU speed line: (what, ours, peer, figure, bound, at least?)
    (">= 2x DataLoader's images/s per core", "libtrain", "dataloader", "samples_per_sec", 2.0, True),
    (">= 1.5x WebDataset's images/s (shards against shards)", "libtrain_shards", "webdataset", "samples_per_sec", 1.5, True),
    ("ahead of SPDL's images/s (folder)", "libtrain", "spdl", "samples_per_sec", 1.0, True),
    ("<= 1/3 of DataLoader's memory (PSS of the process tree)", "libtrain", "dataloader", "pss_peak_mb", 1 / 3, False),
    (">= 2x DataLoader's images/s, JPEGs decoded whole as PIL does", "libtrain_full_decode", "dataloader",
     "samples_per_sec", 2.0, True),
]


def print_goals(best):
    """Each goal of the issue with its measured ratio, met or not; the ratios as a dict."""
    out = {}
    for what, ours, peer, key, bound, at_least in GOALS:
        if ours not in best or peer not in best:
            print(f"goal {what}: not measured ({ours if ours not in best else peer} did not run)")
            continue
        r = best[ours][key] / best[peer][key]
        met = r >= bound if at_least else r <= bound
        out[f"{ours}/{peer}:{key}"] = r
        print(f"goal {what}: {ours}/{peer} = {r:.2f}x: {'met' if met else 'NOT met'}")
    return out


def main():
    sys.stdout.reconfigure(line_buffering=True)
    a = parse_args()
    if a.run_peer:
        return run_peer(a)
    if a.make:
        make_images(a.make, a.count, a.classes, a.shards, a.seed, a.photos)
        if a.only_make:
            return
    sides = available_sides(a)
    print(f"image benchmark: {a.data} ({len(glob.glob(os.path.join(a.data, 'train', '*', '*')))} JPEGs, "
          f"{len(shard_files(a.data))} shards); decode + RandomResizedCrop({a.image_size}) + flip + normalize; "
          f"{a.workers} workers, {a.prefetch} batches ahead, batch {a.batch_size}, {a.epochs} epochs, {a.rounds} rounds "
          f"of {','.join(sides)}; {H.cpu_model()}, {os.cpu_count()} cores", flush=True)
    rows = run_rounds(a, sides)
    if not rows:
        sys.exit("image_peers: no side produced a verified row. Hint: see the messages above.")
    best = H.best_rows(rows, "samples_per_sec")
    ratios = H.print_table(best, "samples_per_sec", "images/s", per_core=a.workers)
    goals = print_goals(best)
    run_id, commit = H.new_run_id(), H.git_commit()
    keep = ["impl", "device", "workers", "batch_size", "image_size", "epochs", "samples", "samples_per_sec",
            "best_samples_per_cpu_second", "reduced_decodes", "samples_per_sec_whole", "pss_peak_mb", "pss_anon_peak_mb", "pss_file_peak_mb", "rss_peak_mb", "procs",
            "runs", "pixel_mean", "peak_rss_mb", "rss_anon_mb", "rss_file_mb"]
    H.append_results(a.results, [
        dict({k: r[k] for k in keep if k in r}, workload="loader-images", images_per_sec_per_core=r["samples_per_sec"] / a.workers,
             cpu=H.cpu_model(), ratio_libtrain_over=ratios.get(impl), goals=goals, run_id=run_id,
             date=f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}", commit=commit, note=a.note) for impl, r in best.items()])


if __name__ == "__main__":
    main()
