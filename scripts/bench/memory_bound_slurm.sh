#!/usr/bin/env bash
# The loader's memory on SLURM: transformer_bench --tokens FILE on 2 CPU ranks (srun, one task on
# each of 2 nodes, Gloo), each rank in a cgroup v1 memory group of its own limited to LIMIT_MB, on a
# token file of FACTOR x the job's allowance (2 x LIMIT_MB), random uint16 tokens. The page cache is
# dropped first, so every page read is charged to a rank's group. Prints per rank: the exit code, the
# group's peak usage and failcnt, the peak RSS (anonymous and file-backed apart; rank 0's from its
# done line, both ranks' polled from /proc); the steps and the rate; which eighths of the file the
# order drew from (the windows the loader's scalable order gives each rank, recomputed here from
# libtrain/src/data/scalable_order.h's specification) and which eighths hold pages read (mincore).
# Not a test: it writes FACTOR x 2 x LIMIT_MB MB to DIR and removes it. Needs root and a running
# cluster (scripts/local-slurm.sh start; export SLURM_CONF=$TRAIN_SLURM_DIR/slurm.conf). Example:
#   LIMIT_MB=512 FACTOR=4 STEPS=300 scripts/bench/memory_bound_slurm.sh
#
# One group per rank, not one for both: SLURM's ConstrainRAMSpace limits a job's memory per node,
# and with one task per node that is one limit per rank; here both "nodes" run on this host, so the
# script makes both groups. The file is FACTOR x the two limits together.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIMIT_MB=${LIMIT_MB:-512} FACTOR=${FACTOR:-4} STEPS=${STEPS:-300} SEQ_LEN=${SEQ_LEN:-64} VOCAB=${VOCAB:-1024}
BATCH=${BATCH:-16} WORKERS=${WORKERS:-2} SEED=${SEED:-1} KEEP=${KEEP:-0}
dir=${DIR:-/tmp/libtrain-memory-bound-slurm}
bench=${TRANSFORMER_BENCH:-$repo/build/bin/transformer_bench}
python=${PYTHON:-$repo/.venv/bin/python}
cg=/sys/fs/cgroup/memory
base=$cg/libtrain-tokens-$$
die() { echo "memory_bound_slurm: $*" >&2; exit 1; }
[ -d $cg ] || die "no cgroup v1 memory controller at $cg"
[ -x "$bench" ] || die "$bench is not built (ninja -C build transformer_bench), or set TRANSFORMER_BENCH"
sinfo -h >/dev/null 2>&1 || die "no SLURM cluster answers: scripts/local-slurm.sh start, then export SLURM_CONF=\$TRAIN_SLURM_DIR/slurm.conf"
mkdir -p "$dir"
tokens=$dir/tokens.u16
cleanup() {
  for r in 0 1; do rmdir "$base-rank$r" 2>/dev/null || true; done
  [ "$KEEP" = 1 ] || rm -f "$tokens"
}
trap cleanup EXIT

# The token file: FACTOR x 2 x LIMIT_MB MiB of random uint16 tokens below VOCAB, written 64 MiB at a time.
bytes=$((FACTOR * 2 * LIMIT_MB * 1024 * 1024))
"$python" - "$tokens" "$bytes" "$VOCAB" <<'PY'
import sys, numpy as np
path, nbytes, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(20261207)
chunk = 32 << 20  # tokens
with open(path, "wb") as f:
    left = nbytes // 2
    while left:
        n = min(chunk, left)
        rng.integers(0, vocab, size=n, dtype=np.uint16).tofile(f)
        left -= n
print(f"wrote {nbytes // 2} uint16 tokens ({nbytes / 2**30:.2f} GiB) below {vocab} to {path}")
PY
sync
echo 1 > /proc/sys/vm/drop_caches && echo "page cache dropped" || echo "page cache NOT dropped"
for r in 0 1; do
  mkdir "$base-rank$r"
  echo $((LIMIT_MB * 1024 * 1024)) > "$base-rank$r/memory.limit_in_bytes"
done
echo "cgroups $base-rank{0,1}: memory.limit_in_bytes $LIMIT_MB MiB each ($((2 * LIMIT_MB)) MiB for the job); data $(du -h "$tokens" | cut -f1) = $FACTOR x the job's"

# Each rank's resident memory, polled from /proc while it runs: the largest RssAnon and RssFile seen
# and the last VmHWM (its peak RSS), per rank, into $dir/rss.rank{0,1}.
poll_rss() {
  local r=$1 anon=0 file=0 hwm=0 pid a f h
  while [ ! -e "$dir/done" ]; do
    pid=$(head -1 "$base-rank$r/cgroup.procs" 2>/dev/null || true)
    if [ -n "$pid" ] && [ -r "/proc/$pid/status" ]; then
      read -r a f h < <(awk '/^RssAnon/ {a=$2} /^RssFile/ {f=$2} /^VmHWM/ {h=$2} END {print a+0, f+0, h+0}' "/proc/$pid/status" 2>/dev/null || echo "0 0 0")
      if ((a > anon)); then anon=$a; fi
      if ((f > file)); then file=$f; fi
      if ((h > hwm)); then hwm=$h; fi
      echo "$anon $file $hwm" > "$dir/rss.rank$r"
    fi
    sleep 0.2
  done
}
rm -f "$dir/done" "$dir"/rss.rank*
poll_rss 0 & p0=$!
poll_rss 1 & p1=$!

cmd="$bench --tokens $tokens --seq-len $SEQ_LEN --vocab $VOCAB --layers 2 --d-model 128 --heads 4 --ffn 512 \
  --batch-size $BATCH --epochs 1 --max-steps $STEPS --threads 1 --data-workers $WORKERS --seed $SEED --device cpu \
  --log-interval 50 --eval-sequences 256"
echo "srun -N 2 -n 2 --ntasks-per-node=1: sh -c 'echo \$\$ > $base-rank\$SLURM_PROCID/cgroup.procs && exec $cmd'"
set +e
t0=$(date +%s.%N)
srun -N 2 -n 2 --ntasks-per-node=1 --kill-on-bad-exit=1 -o "$dir/out.%t" -e "$dir/err.%t" \
  sh -c "echo \$\$ > $base-rank\$SLURM_PROCID/cgroup.procs && exec $cmd"
rc=$?
t1=$(date +%s.%N)
set -e
touch "$dir/done"
wait $p0 $p1 2>/dev/null || true
echo "srun exit $rc after $(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s"
for r in 0 1; do
  g=$base-rank$r
  read -r anon file hwm < "$dir/rss.rank$r" || anon=0 file=0 hwm=0
  echo "rank $r: cgroup max_usage $(( $(cat "$g/memory.max_usage_in_bytes") >> 20 )) MiB of $LIMIT_MB, failcnt $(cat "$g/memory.failcnt");" \
    "polled: peak RSS $((hwm / 1024)) MiB, RssAnon max $((anon / 1024)) MiB, RssFile max $((file / 1024)) MiB;" \
    "$(grep -E '^total_(rss|cache|mapped_file|pgpgin) ' "$g/memory.stat" | tr '\n' ' ')"
done
grep -hE "loader of|Train Epoch.*\[|Test set" "$dir/err.0" | tail -3
grep -h '"event":"done"' "$dir/out.0" | grep -oE '"(steps|peak_rss_mb|rss_anon_mb|rss_file_mb|data_wait_seconds|images_per_sec|world_size|params_sha256)":[^,}]*' | tr '\n' ' '; echo
grep -h '"event":"transformer"' "$dir/out.0" | grep -oE '"tokens_per_sec[a-z_]*":[^,}]*' | tr '\n' ' '; echo

# Where the order drew from: the windows (seq_len + 1 tokens each) of the first STEPS x BATCH
# positions of each rank, as ScalableRankOrder computes them (above 2^24 windows) or as
# DistributedSampler's (below: recomputed with torch), in eighths of the file; and the pages of the
# file in the page cache now (mincore), per eighth.
"$python" - "$tokens" "$SEQ_LEN" "$STEPS" "$BATCH" "$SEED" <<'PY'
import ctypes, mmap, os, sys
path, seq, steps, batch, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
size = os.path.getsize(path)
n = (size // 2 - seq - 1) // (seq + 1) + 1  # windows of seq + 1 tokens, stride seq + 1
M = (1 << 64) - 1
def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)
def scalable(n, seed, epoch):
    bits = max(2, (n - 1).bit_length())
    base = splitmix64(splitmix64(seed) ^ epoch)
    keys = [splitmix64((base + r) & M) for r in range(8)]
    def network(x):
        wl, wr = (bits + 1) // 2, bits // 2
        left, right = x >> wr, x & ((1 << wr) - 1)
        for k in keys:
            left, right = right, left ^ (splitmix64(right ^ k) & ((1 << wl) - 1))
            wl, wr = wr, wl
        return (left << wr) | right
    def at(p):
        x = network(p)
        while x >= n: x = network(x)
        return x
    return at
world, count = 2, steps * batch
ahead = count + 2 * batch  # and the 2 batches the loader reads ahead (--prefetch 2) when the run stops
if n > (1 << 24):
    at = scalable(n, seed, 0)
    kind = "the scalable order"
    idx = {r: [at((r + k * world) % n) for k in range(ahead)] for r in range(world)}
else:
    import torch
    g = torch.Generator(); g.manual_seed(seed)
    perm = torch.randperm(n, generator=g).tolist()
    perm += perm[: (-n) % world]
    kind = "DistributedSampler's order"
    idx = {r: perm[r::world][:ahead] for r in range(world)}
for r in range(world):
    trained = idx[r][:count]
    per = [sum(1 for i in trained if i * 8 // n == e) for e in range(8)]
    print(f"rank {r}: {count} windows of {n} ({kind}), indices {min(trained)}..{max(trained)}, "
          f"eighths touched {sum(1 for c in per if c)}/8, windows per eighth {per}")
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(path, os.O_RDONLY)
addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
vec = (ctypes.c_ubyte * pages)()
if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
    print("mincore failed", ctypes.get_errno())
else:
    # The pages the computed windows lie on (a window of seq + 1 tokens may cross into the next page;
    # sample 0 is read first, for the batches' shapes).
    window = (seq + 1) * 2
    expected = {0}
    for r in range(world):
        for i in idx[r]:
            expected.update(range(i * window // mmap.PAGESIZE, ((i + 1) * window - 1) // mmap.PAGESIZE + 1))
    resident = [p for p in range(pages) if vec[p] & 1]
    per = [0] * 8
    for p in resident: per[p * 8 // pages] += 1
    inside = sum(1 for p in resident if p in expected)
    print(f"page cache now: {len(resident)} of the file's {pages} pages resident ({len(resident) * mmap.PAGESIZE >> 20} MiB), "
          f"per eighth {per}; {inside} of them hold windows of the order computed above ({len(expected)} pages)")
    for r in range(world):
        last = idx[r][count - 5 * batch:count]
        hit = sum(1 for i in last if vec[i * window // mmap.PAGESIZE] & 1)
        print(f"rank {r}: the pages of its last {len(last)} windows trained (5 steps) resident: {hit}/{len(last)} "
              f"(the file's pages on average: {len(resident) / pages:.2%})")
os.close(fd)
PY
exit $rc
