#!/usr/bin/env bash
# The benchmark's recurrent program (scripts/bench/gru) on the CPU with small sizes:
#   learns   one rank, 4 epochs on the generated sign rule: the epoch train loss falls and the test
#            accuracy rises, well above chance (1/4); the done line and the program's own JSON
#            line parse and agree (parameter count: gru.h's formula);
#   ranks    two ranks under `trainctl local` (Gloo), 2 epochs: done line with world_size 2.
#   same_ops the C++ model runs the same ATen ops per step as Python's bench_models.GRUClassifier
#            (torch profiler traces of both, scripts/bench/trace_summary.py). Exit 77 (skipped)
#            without .venv's Python.
# usage: gru_test.sh learns|ranks|same_ops BIN_DIR
set -uo pipefail
step=$1 bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
small=(--features 4 --hidden 16 --seq-len 16 --device cpu --threads 1 --lr 0.01 --log-interval 1000000 --seed 3)
case $step in
  learns)
    "$bin/gru_bench" "${small[@]}" --batch-size 32 --epochs 4 --train-sequences 1024 --eval-sequences 512 \
      --metrics "$work/m.jsonl" >"$work/out" 2>"$work/err" || { tail -20 "$work/err"; fail "gru_bench exited $?"; }
    grep -q "training step: eager" "$work/err" || fail "no 'training step: eager' line in the log"
    grep -q "4 features, hidden 16, sequence 16, 4 classes" "$work/err" || fail "no model line in the log"
    python3 - "$work/out" "$work/m.jsonl" <<'PY' || fail "checks above"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
done = [l for l in lines if l.get("event") == "done"]
extra = [l for l in lines if l.get("event") == "gru"]
assert done and extra, f"expected a done line and a gru line, found {lines}"
d, e = done[-1], extra[-1]
assert d["epochs"] == 4 and d["world_size"] == 1 and d["images_per_sec"] > 0, d
assert abs(e["sequences_per_sec"] - d["images_per_sec"]) <= 0.1, (d, e)
f, h = e["features"], e["hidden"]
assert (f, h, e["seq_len"]) == (4, 16, 16) and e["params"] == 3 * h * (f + h + 2) + h * 4 + 4, e
epochs = [json.loads(l) for l in open(sys.argv[2]) if '"event":"epoch"' in l.replace(" ", "")]
losses = [r["train_loss"] for r in epochs]
acc = [r["test_accuracy"] for r in epochs]
print("epoch train losses", losses, "test accuracies", acc)
assert len(losses) == 4 and len(acc) == 4, epochs
assert losses[-1] < 0.7 * losses[0], f"expected the loss to fall by 30%, found {losses}"
assert acc[-1] > acc[0] + 0.1 and acc[-1] > 0.5, f"expected the accuracy to rise well above chance (0.25), found {acc}"
PY
    ;;
  ranks)
    "$bin/trainctl" local --nproc 2 --no-prefix -- "$bin/gru_bench" "${small[@]}" --batch-size 16 --epochs 2 \
      --train-sequences 256 --eval-sequences 32 >"$work/out" 2>"$work/err" || { tail -20 "$work/err"; fail "trainctl local exited $?"; }
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
    "$bin/gru_bench" "${small[@]}" --batch-size 16 --epochs 1 --train-sequences 256 --eval-sequences 16 \
      --profile "$work/lt" --profile-steps 4:8 >"$work/out" 2>"$work/err" || { tail -20 "$work/err"; fail "gru_bench exited $?"; }
    "$py" "$repo/scripts/bench/peers.py" --workload gru --features 4 --hidden 16 --seq-len 16 --device cpu \
      --mode eager --precision fp32 --batch-size 16 --steps 5 --warmup 2 \
      --profile "$work/py" >"$work/pyout" 2>"$work/pyerr" || { tail -20 "$work/pyerr"; fail "peers.py exited $?"; }
    "$py" - "$repo/scripts/bench" "$work/lt/trace-rank0.json" "$work/py/gru-eager-fp32-b16-rank0.json" <<'PY' || fail "checks above"
import sys
sys.path.insert(0, sys.argv[1])
import trace_summary as ts
_, _, cpp, _ = ts.load(sys.argv[2] + ":5", ("cpu_op",))
_, _, py, _ = ts.load(sys.argv[3] + ":5", ("cpu_op",))
# The network's ops, forward and backward (the optimizer and the trainer's own checks differ by
# design). On the CPU aten::gru runs as cell ops; on a GPU both sides run cuDNN's under it.
model_ops = ["aten::gru", "aten::linear", "aten::addmm", "aten::mm", "aten::sigmoid_", "aten::tanh_",
             "aten::unsafe_split", "aten::zeros", "AddmmBackward0", "MmBackward0", "SelectBackward0",
             "StackBackward0", "UnsafeSplitBackward0", "SigmoidBackward0", "TanhBackward0", "UnbindBackward0"]
count = lambda d, k: round(d.get(k, (0.0, 0.0))[1], 3)
diff = {k: (count(cpp, k), count(py, k)) for k in model_ops if count(cpp, k) != count(py, k)}
print("per step (C++, Python):", {k: (count(cpp, k), count(py, k)) for k in model_ops if count(cpp, k) or count(py, k)})
assert count(py, "aten::gru") == 1, "expected one aten::gru per step in Python's trace"
assert not diff, f"the C++ model's ops differ from Python's (C++, Python) per step: {diff}"
PY
    ;;
  *) fail "unknown step '$step' (learns, ranks, same_ops)";;
esac
echo "PASS: $step"
