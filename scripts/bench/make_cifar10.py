"""Writes CIFAR-10 files in the binary version's layout (data_batch_1.bin .. data_batch_5.bin and
test_batch.bin: records of 1 label byte + 3072 pixel bytes) with random pixels and labels 0..9,
for throughput benchmarks where the real files aren't at hand. Not part of libtrain.

usage: python3 scripts/bench/make_cifar10.py --out DIR [--train 50000] [--test 10000] [--seed 0]
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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="the folder to write (created if missing)")
    p.add_argument("--train", type=int, default=50000, help="training records (at least 5)")
    p.add_argument("--test", type=int, default=10000, help="test records (at least 1)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.train < 5 or a.test < 1:
        p.error(f"--train must be >= 5 and --test >= 1, found {a.train} and {a.test}")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    base, extra = divmod(a.train, 5)
    for i in range(5):
        n = base + (1 if i < extra else 0)
        with open(os.path.join(a.out, f"data_batch_{i + 1}.bin"), "wb") as f:
            f.write(records(rng, n))
    with open(os.path.join(a.out, "test_batch.bin"), "wb") as f:
        f.write(records(rng, a.test))
    print(f"make_cifar10: {a.train} training and {a.test} test records (random) in {a.out}")


if __name__ == "__main__":
    main()
