#!/usr/bin/env bash
# The benchmark's Python side on the CPU (scripts/bench/peers.py, bench_models.py, three_workloads.py):
#   the models' parameter counts (ResNet-18: 11,173,962; the transformer's and the GRU's formulas),
#   peers.py's eager and graph modes on a tiny transformer and a small GRU at world 1 and 2 (Gloo,
#   --spawn) printing parseable rows, the driver's table (ratios against the fastest peer and eager) from a results file, and
#   accuracy.py's libtrain-against-Python rows and table (tiny transformer, 2 seeds).
# usage: peers_test.sh REPO        (exit 77 = skipped: no .venv with torch)
set -uo pipefail
repo=$1
py=$repo/.venv/bin/python
[[ -x $py ]] || { echo "SKIP: $py not found (scripts/setup.sh makes it)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$repo/scripts/bench" || fail "no scripts/bench"
"$py" - <<'PY' || fail "parameter counts"
import bench_models as bm
n = sum(p.numel() for p in bm.ResNet18().parameters())
assert n == 11173962, f"ResNet-18: expected 11,173,962 parameters, found {n}"
for dims in [(6, 512, 8, 2048, 256, 8192), (2, 32, 4, 64, 16, 32)]:
    n = sum(p.numel() for p in bm.Encoder(*dims).parameters())
    assert n == bm.transformer_params(*dims)[0], (dims, n, bm.transformer_params(*dims))
assert bm.transformer_params(6, 512, 8, 2048, 256, 8192) == (27443200, 23117824)
for dims in [(4, 32), (8, 32), (4, 16)]:
    n = sum(p.numel() for p in bm.GRUClassifier(*dims).parameters())
    assert n == bm.gru_params(*dims), (dims, n, bm.gru_params(*dims))
x, y = bm.sign_sequences(4096, 16, 4, seed=1)
assert x.shape == (4096, 16, 4) and y.shape == (4096,) and set(y.tolist()) == {0, 1, 2, 3}, (x.shape, y.shape)
print("parameter counts ok")
PY
# shellcheck disable=SC2054  # commas inside --mode and the like are values
tiny=(--workload transformer --layers 2 --d-model 32 --heads 4 --ffn 64 --seq-len 16 --vocab 32 --device cpu
      --mode eager,graph --precision fp32 --batch-size 4 --steps 3 --warmup 1)
"$py" peers.py "${tiny[@]}" >"$work/w1" 2>"$work/e1" || { tail -20 "$work/e1"; fail "peers.py world 1"; }
"$py" peers.py "${tiny[@]}" --spawn 2 >"$work/w2" 2>"$work/e2" || { tail -20 "$work/e2"; fail "peers.py --spawn 2"; }
# shellcheck disable=SC2054
gru=(--workload gru --features 4 --hidden 16 --seq-len 16 --device cpu --mode eager,graph --precision fp32
     --batch-size 4 --steps 3 --warmup 1)
"$py" peers.py "${gru[@]}" >"$work/g1" 2>"$work/ge1" || { tail -20 "$work/ge1"; fail "peers.py gru world 1"; }
"$py" peers.py "${gru[@]}" --spawn 2 >"$work/g2" 2>"$work/ge2" || { tail -20 "$work/ge2"; fail "peers.py gru --spawn 2"; }
"$py" - "$work/g1" "$work/g2" <<'PY' || fail "gru rows"
import json, math, sys
import bench_models as bm
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f)]
assert [(r["mode"], r["world_size"]) for r in rows] == [("eager", 1), ("graph", 1), ("eager", 2), ("graph", 2)], rows
for r in rows:
    assert r["workload"] == "gru" and r["images_per_sec"] > 0 and math.isfinite(r["last_loss"]), r
    assert r["model_params"] == bm.gru_params(4, 16) and r["seq_len"] == 16, r
print("gru rows ok")
PY
cat "$work/w1" "$work/w2" >"$work/rows.jsonl"
cat >>"$work/rows.jsonl" <<'ROWS'
{"workload": "transformer", "impl": "libtrain", "mode": "default", "precision": "fp32", "world_size": 1, "batch_size": 4, "images_per_sec": 1000.0, "step": "eager", "mfu": 0.5}
ROWS
"$py" - "$work/rows.jsonl" <<'PY' || fail "rows"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
py = [r for r in rows if r["impl"] == "python"]
assert [(r["mode"], r["world_size"]) for r in py] == [("eager", 1), ("graph", 1), ("eager", 2), ("graph", 2)], py
for r in py:
    for k in ("workload", "precision", "batch_size", "images_per_sec", "tokens_per_sec", "flops_per_seq"):
        assert k in r, (k, r)
    assert r["images_per_sec"] > 0 and math.isfinite(r["last_loss"]), r
    assert abs(r["tokens_per_sec"] - 16 * r["images_per_sec"]) < 16, r
print("rows ok")
PY
"$py" three_workloads.py --table "$work/rows.jsonl" >"$work/table" || fail "three_workloads.py --table"
cat "$work/table"
grep -q "| transformer | 1 x 4 | fp32 | eager | 1000.0 |" "$work/table" || fail "no libtrain line in the table"
grep -Eq "\| [0-9.]+x \|" "$work/table" || fail "no ratio in the table"
# accuracy.py: libtrain's transformer_bench (build/) against the Python loop, 2 seeds, tiny sizes.
if [[ -x $repo/build/bin/transformer_bench ]]; then
  "$py" accuracy.py --device cpu --tiny --workloads transformer --seeds 1,2 --build "$repo/build" \
    --results "$work/acc.jsonl" >"$work/acc" 2>"$work/acc.err" || { tail -20 "$work/acc.err"; cat "$work/acc"; fail "accuracy.py"; }
  "$py" - "$work/acc.jsonl" <<'PY' || fail "accuracy rows"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["impl"], r["seed"]) for r in rows] == [("libtrain", 1), ("python", 1), ("libtrain", 2), ("python", 2)], rows
assert all(0 <= r["test_accuracy"] <= 1 and r["epochs"] == 2 and r["steps"] == 32 for r in rows), rows
print("accuracy rows ok")
PY
  grep -Eq "^\| transformer \| 2 x 16, fp32 \| .* \| (within|outside) noise \|$" "$work/acc" || { cat "$work/acc"; fail "no accuracy table line"; }
else
  echo "note: $repo/build/bin/transformer_bench not built: accuracy.py not checked"
fi
echo "PASS"
