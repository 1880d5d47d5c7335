#!/usr/bin/env bash
# The benchmark's transformer program (scripts/bench/transformer) on the CPU with tiny sizes:
#   learns   one rank, 6 epochs: the epoch train loss falls (the generated rule is learnable), the
#            done line and the program's own JSON line parse and agree;
#   ranks    two ranks under `trainctl local` (Gloo), 2 epochs: done line with world_size 2.
#   same_ops the C++ model runs the same ATen ops per step as Python's bench_models.Encoder (torch
#            profiler traces of both, scripts/bench/trace_summary.py): the benchmark compares one
#            network, not LibTorch's C++ frontend against Python (torch::nn::Linear's matmul + bias
#            add, qkv[i]'s select backwards). Exit 77 (skipped) without .venv's Python.
# usage: transformer_test.sh learns|ranks|same_ops BIN_DIR
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
  same_ops)
    repo=$(cd "$(dirname "$0")/../.." && pwd)
    py=$repo/.venv/bin/python
    [[ -x $py ]] || { echo "SKIP: $py not found (scripts/setup.sh makes it)"; exit 77; }
    "$bin/transformer_bench" "${tiny[@]}" --epochs 1 --train-sequences 256 --eval-sequences 16 \
      --profile "$work/lt" --profile-steps 4:8 >"$work/out" 2>"$work/err" || { tail -20 "$work/err"; fail "transformer_bench exited $?"; }
    "$py" "$repo/scripts/bench/peers.py" --workload transformer --layers 2 --d-model 32 --heads 4 --ffn 64 \
      --seq-len 16 --vocab 32 --device cpu --mode eager --precision fp32 --batch-size 16 --steps 5 --warmup 2 \
      --profile "$work/py" >"$work/pyout" 2>"$work/pyerr" || { tail -20 "$work/pyerr"; fail "peers.py exited $?"; }
    "$py" - "$repo/scripts/bench" "$work/lt/trace-rank0.json" "$work/py/transformer-eager-fp32-b16-rank0.json" <<'PY' || fail "checks above"
import sys
sys.path.insert(0, sys.argv[1])
import trace_summary as ts
_, _, cpp, _ = ts.load(sys.argv[2] + ":5", ("cpu_op",))
_, _, py, _ = ts.load(sys.argv[3] + ":5", ("cpu_op",))
# The network's ops, forward and backward (the optimizer and the trainer's own checks differ by design).
model_ops = ["aten::linear", "aten::addmm", "aten::matmul", "aten::embedding", "aten::native_layer_norm",
             "aten::gelu", "aten::scaled_dot_product_attention", "aten::unbind",
             "AddmmBackward0", "MmBackward0", "SelectBackward0", "UnbindBackward0", "GeluBackward0",
             "NativeLayerNormBackward0", "EmbeddingBackward0"]
count = lambda d, k: round(d.get(k, (0.0, 0.0))[1], 3)
diff = {k: (count(cpp, k), count(py, k)) for k in model_ops if count(cpp, k) != count(py, k)}
print("per step (C++, Python):", {k: (count(cpp, k), count(py, k)) for k in model_ops if count(cpp, k) or count(py, k)})
assert count(py, "aten::addmm") > 0, "expected Python's F.linear to run addmm"
assert not diff, f"the C++ model's ops differ from Python's (C++, Python) per step: {diff}"
PY
    ;;
  *) fail "unknown step '$step' (learns, ranks, same_ops)";;
esac
echo "PASS: $step"
