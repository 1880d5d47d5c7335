#!/usr/bin/env bash
# The benchmark's transformer program (scripts/bench/transformer) on the CPU with tiny sizes:
#   learns   one rank, 6 epochs: the epoch train loss falls (the generated rule is learnable), the
#            done line and the program's own JSON line parse and agree;
#   ranks    two ranks under `trainctl local` (Gloo), 2 epochs: done line with world_size 2.
# usage: transformer_test.sh learns|ranks BIN_DIR
set -uo pipefail
step=$1 bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--layers 2 --d-model 32 --heads 4 --ffn 64 --seq-len 16 --vocab 32 --device cpu --threads 1
      --batch-size 16 --lr 0.01 --log-interval 1000000 --seed 3)
case $step in
  learns)
    "$bin/transformer_bench" "${tiny[@]}" --epochs 6 --train-sequences 512 --eval-sequences 64 \
      --metrics "$work/m.jsonl" >"$work/out" 2>"$work/err" || { tail -20 "$work/err"; fail "transformer_bench exited $?"; }
    grep -q "training step: eager" "$work/err" || fail "no 'training step: eager' line in the log"
    grep -q "GFLOP per sequence" "$work/err" || fail "no FLOPs line in the log"
    python3 - "$work/out" "$work/m.jsonl" <<'PY' || fail "checks above"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
done = [l for l in lines if l.get("event") == "done"]
extra = [l for l in lines if l.get("event") == "transformer"]
assert done and extra, f"expected a done line and a transformer line, found {lines}"
d, e = done[-1], extra[-1]
assert d["epochs"] == 6 and d["world_size"] == 1 and d["images_per_sec"] > 0, d
assert abs(e["tokens_per_sec"] - d["images_per_sec"] * 16) <= 0.1 * 16 + 1e-6 * e["tokens_per_sec"], (d, e)
assert e["seq_len"] == 16 and e["flops_per_seq"] == 6 * e["matmul_params"] * 16 + 12 * 2 * 32 * 16 * 16, e
epochs = [json.loads(l) for l in open(sys.argv[2]) if '"event":"epoch"' in l.replace(" ", "")]
losses = [r["train_loss"] for r in epochs]
print("epoch train losses", losses, "test accuracy", d["test_accuracy"])
assert len(losses) == 6, losses
assert losses[-1] < 0.6 * losses[0], f"expected the loss to fall by 40%, found {losses}"
PY
    ;;
  ranks)
    "$bin/trainctl" local --nproc 2 --no-prefix -- "$bin/transformer_bench" "${tiny[@]}" --epochs 2 \
      --train-sequences 128 --eval-sequences 32 >"$work/out" 2>"$work/err" || { tail -20 "$work/err"; fail "trainctl local exited $?"; }
    python3 - "$work/out" <<'PY' || fail "checks above"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
done = [l for l in lines if l.get("event") == "done"]
assert len(done) == 1 and done[0]["world_size"] == 2 and done[0]["epochs"] == 2, lines
print("2 ranks:", done[0]["images_per_sec"], "sequences/s, train loss", done[0]["train_loss"])
PY
    ;;
  *) fail "unknown step '$step' (learns, ranks)";;
esac
echo "PASS: $step"
