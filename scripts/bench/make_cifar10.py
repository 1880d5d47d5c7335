"""Writes CIFAR-10 files in the binary version's layout (data_batch_1.bin .. data_batch_5.bin and
test_batch.bin: records of 1 label byte + 3072 pixel bytes) with random pixels and labels 0..9,
for throughput benchmarks where the real files aren't at hand. Not part of libtrain.

usage: python3 scripts/bench/make_cifar10.py --out DIR [--train 50000] [--test 10000] [--seed 0] [--learnable C]
--learnable C writes classes a network can learn, not easily: uniform noise 0..255 with an 8 x 8
square brighter by C in the class's place and colour channel (class k: row k // 4, column k % 4,
channel k % 3); C = 48 makes the square about 5 noise standard deviations of its mean bright.
The training records are spread over the five data_batch files (10000 each for 50000).
"""
import argparse
import os
import random

RECORD = 1 + 3 * 32 * 32


def records(rng, n):
    pixels = bytearray(rng.randbytes(n * RECORD))
    labels = rng.randbytes(n)
    for i in range(n):
        pixels[i * RECORD] = labels[i] % 10
    return bytes(pixels)


def learnable_records(rng, n, contrast):
    """Noise records whose class is a faint square (see the usage)."""
    out = bytearray(rng.randbytes(n * RECORD))
    for i in range(n):
        k = rng.randrange(10)
        base = i * RECORD
        out[base] = k
        plane = base + 1 + (k % 3) * 1024
        top, left = (k // 4) * 8, (k % 4) * 8
        for r in range(top, top + 8):
            row = plane + r * 32 + left
            out[row:row + 8] = bytes(min(255, v + contrast) for v in out[row:row + 8])
    return bytes(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the folder to write (created if missing)")
    p.add_argument("--train", type=int, default=50000, help="training records (at least 5)")
    p.add_argument("--test", type=int, default=10000, help="test records (at least 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--learnable", type=int, default=0, metavar="C",
                   help="classes as a square brighter by C (1..255) on noise, instead of random labels")
    a = p.parse_args()
    if not 0 <= a.learnable <= 255:
        p.error(f"--learnable: expected a brightness in 1..255 (0: random labels), found {a.learnable}")
    write = (lambda r, n: learnable_records(r, n, a.learnable)) if a.learnable else records
    if a.train < 5 or a.test < 1:
        p.error(f"--train must be >= 5 and --test >= 1, found {a.train} and {a.test}")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    base, extra = divmod(a.train, 5)
    for i in range(5):
        n = base + (1 if i < extra else 0)
        with open(os.path.join(a.out, f"data_batch_{i + 1}.bin"), "wb") as f:
            f.write(write(rng, n))
    with open(os.path.join(a.out, "test_batch.bin"), "wb") as f:
        f.write(write(rng, a.test))
    kind = f"learnable, contrast {a.learnable}" if a.learnable else "random"
    print(f"make_cifar10: {a.train} training and {a.test} test records ({kind}) in {a.out}")


if __name__ == "__main__":
    main()
