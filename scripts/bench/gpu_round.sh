#!/usr/bin/env bash
# The GPU figures of docs/benchmarks.md (host syncs, goodput under failures, snapshots' cost, the
# small models' scaling, ZeRO-1; 2026-11-27), in one device call on a bare GPU node with 2 GPUs (4
# for the zero and four parts' 4-GPU rows):
# configures and builds build-gpu/ against the machine's torch (and .deps/usr from
# scripts/gpu-deps.sh), then runs the parts named in PARTS (default: sync goodput snap):
#   sync     host CUDA syncs per step (LD_PRELOAD scripts/bench/synctrace.c), MNIST at 1 and 2 GPUs
#   goodput  scripts/bench/goodput.py --launcher local --device cuda (kill, stall, kill)
#   split    MNIST's epochs at SPLIT_NPROCS (4) GPUs and two lengths (SPLIT_SAMPLES), --backend auto
#            against nccl: a step's cost and an epoch end's apart
#   snap2    snapshots' cost: train --snapshot-every auto vs 0, 2 GPUs, 40000 steps, two rounds
#   gru      three_workloads.py --workloads gru (fp32, eager and graph peers) and its host syncs
#   gruprof  profiles of gru_bench and peers.py's graph mode, compared with trace_summary.py
#   tests    nonfinite_watch_test, graph_memsets_test, TrainGpu.*, DistTrainGpu.*, ShardOptimizerGpu.*, ddp_test's *Gpu.*
#            (TESTS= picks among watch memsets gpu dist shard ddp; EXTRA_TARGETS must build them;
#            GPU_FILTER= and DIST_FILTER= narrow gpu and dist)
#   zero     shard_optimizer.py: ZeRO-1 vs unsharded, the transformer at 2 and 4 GPUs (WORLDS=), memory
#   clipsync host CUDA syncs of 3000-step MNIST runs at 2 GPUs: plain, --clip-grad-norm, sharded, both
#   four     three_workloads.py, every workload at 1, 2 and 4 GPUs (NPROCS=) with the Python peers
#   scale    the GRU and MNIST (SCALE_WORKLOADS=) at batch 64 on 1, 2 and 4 GPUs, each run a
#            GPUs:variant of SCALE_CFGS= (default, old, nccl, peer, peergloo, env=A=1,B=2: default with those
#            variables set; VARIANT:env=A=1: that variant with them, as 2:nccl:env=A=1), ROUNDS= times interleaved, 3 epochs of
#            ~1000 steps (SCALE_STEPS=), host syncs counted; rate = the steady epochs' mean; variant
#            old runs OLD_B's binaries (an earlier commit's build) for an A/B in the same call
#   prof     profiles of PROF_WL (mnist, gru) at PROF_NPROCS (1 2) GPUs, batch PROF_BATCH, extra flags PROF_FLAGS
#   gruprof2 profiles of gru_bench at 1 and 2 GPUs (batch GRUPROF_BATCH, 64): GPU busy and span per
#            step, the kernels
#   boundary the GRU's epoch boundary (300-step epochs, batch 64) at BOUNDARY_NPROCS (1 4) GPUs: each
#            epoch's ms, and a profile of steps 595-605 (the second epoch's end, after the first
#            evaluation's one-time loading): the GPU's idle spans and the host's work in them
#            (BOUNDARY_FLAGS: more flags of gru_bench, as --backend nccl)
#   epochs   each epoch's milliseconds and the steady rate (--metrics) of the GRU (300-step epochs,
#            as three_workloads.py runs it) and MNIST (60,000 samples) at batch 64, one run per
#            WORKLOAD:GPUS:VAR=VALUE[,VAR=VALUE][:nccl|peergloo] of EPOCH_CFGS (DEFAULT=1: no
#            variable; nccl: --backend nccl), ROUNDS= times
# Output in $OUT (the device tool's folder). Example:
#   OUT=/tmp/out PARTS="gru gruprof" scripts/bench/gpu_round.sh
set -u
OUT=${OUT:-$PWD/logs/gpu}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TRAIN_FASHION_MNIST_DIR=$PWD/.deps/fashion-mnist
nvidia-smi -L | tee $OUT/machine.txt
tp=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
t0=$(date +%s)
if [ ! -f build-gpu/build.ninja ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAIN_USE_CCACHE=OFF -DCMAKE_PREFIX_PATH="$PWD/.deps/usr;$tp" > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
fi
cmake --build build-gpu -j $(nproc) --target train_program trainctl gru_bench ${EXTRA_TARGETS:-} > $OUT/build.log 2>&1 || { grep -E "error" -A3 $OUT/build.log | head -40; exit 1; }
echo "built in $(( $(date +%s) - t0 )) s"
B=$PWD/build-gpu/bin
for part in ${PARTS:-sync goodput snap}; do
 case $part in
 sync)
  gcc -shared -fPIC -O2 -o $OUT/synctrace.so scripts/bench/synctrace.c -ldl
  for cfg in 1:auto 2:auto 2:off; do
    n=${cfg%:*}; ar=${cfg#*:}
    s=$(date +%s)
    SYNC_FROM=1500 LD_PRELOAD=$OUT/synctrace.so timeout 120 $B/trainctl local --nproc $n --no-prefix -- $B/train --device cuda --epochs 1000 --max-steps 2500 --batch-size 64 --limit-test-samples 1000 --log-interval 1000 --peer-allreduce $ar > $OUT/sync-$n-$ar.out 2> $OUT/sync-$n-$ar.err
    echo "sync $n GPU(s) --peer-allreduce $ar rc=$? $(( $(date +%s) - s )) s: $(grep SYNCCOUNT $OUT/sync-$n-$ar.err | tr '\n' ' ') $(grep -o '"images_per_sec_steady":[0-9.]*' $OUT/sync-$n-$ar.out)"
  done
  # resolve the train binary's frames (one archive: the device returns a few files only)
  for f in $OUT/sync-*.err; do
    grep -o "$B/train(+0x[0-9a-f]*)" $f | sort -u | head -40 | while read fr; do off=${fr#*+}; off=${off%)}; echo "$fr $(addr2line -f -C -e $B/train $off | head -1 | cut -c1-160)"; done > $f.resolved
  done
  (cd $OUT && tar czf sync.tgz sync-* && rm -f sync-* synctrace.so)
  ;;
 goodput)
  s=$(date +%s)
  timeout 420 python3 scripts/bench/goodput.py --launcher local --device cuda --build $B --interval ${INTERVAL:-25} --failures kill,stall,kill --stall-timeout 5 --json $OUT/goodput.json --work-root /tmp > $OUT/goodput.log 2>&1
  echo "goodput rc=$? $(( $(date +%s) - s )) s"; tail -8 $OUT/goodput.log
  ;;
 gru)
  s=$(date +%s)
  timeout 330 python3 scripts/bench/three_workloads.py --build build-gpu --workloads gru --nproc 1,2 --precisions fp32 --modes eager,graph --budget-s 280 --results $OUT/gru.jsonl > $OUT/gru.txt 2>&1
  echo "gru rc=$? $(( $(date +%s) - s )) s"; grep -v '^{' $OUT/gru.txt | tail -14
  gcc -shared -fPIC -O2 -o /tmp/synctrace.so scripts/bench/synctrace.c -ldl
  for n in 1 2; do
    SYNC_FROM=${GRU_SYNC_FROM:-400} LD_PRELOAD=/tmp/synctrace.so timeout 120 $B/trainctl local --nproc $n --no-prefix -- $B/gru_bench --device cuda --batch-size 64 --epochs 1 --max-steps 1500 --log-interval 1000 > $OUT/grusync-$n.out 2> $OUT/grusync-$n.err
    echo "grusync $n rc=$?: $(grep SYNCCOUNT $OUT/grusync-$n.err | tr '\n' ' ') $(grep -o '"sequences_per_sec[a-z_]*":[0-9.]*' $OUT/grusync-$n.out | head -2 | tr '\n' ' ')"
    for f in $OUT/grusync-$n.err; do
      grep -o "$B/gru_bench(+0x[0-9a-f]*)" $f | sort -u | head -60 | while read fr; do off=${fr#*+}; off=${off%)}; echo "$fr $(addr2line -f -C -e $B/gru_bench $off | head -1 | cut -c1-200)"; done > $f.resolved
    done
  done
  (cd $OUT && tar czf grusync.tgz grusync-* && rm -f grusync-*)
  ;;
 gruprof)
  rm -rf /tmp/prof && mkdir -p /tmp/prof
  timeout 120 $B/gru_bench --device cuda --batch-size 64 --epochs 1 --max-steps 300 --log-interval 1000 --tf32 off --profile /tmp/prof/lt --profile-steps 200:249 > $OUT/gp.out 2> $OUT/gp.err; echo "libtrain profile rc=$?"
  timeout 200 python3 scripts/bench/peers.py --workload gru --mode graph --precision fp32 --batch-size 64 --steps 50 --warmup 200 --device cuda --profile /tmp/prof/py > $OUT/pp.out 2> $OUT/pp.err; echo "peers profile rc=$?"; tail -3 $OUT/pp.err
  lt=$(ls /tmp/prof/lt/*.json* 2>/dev/null | head -1); py=$(ls /tmp/prof/py/*.json 2>/dev/null | head -1)
  echo "traces: $lt $py"
  python3 scripts/bench/trace_summary.py $lt:50 $py:50 --top 40 > $OUT/gru_kernels.txt 2>&1; head -60 $OUT/gru_kernels.txt
  python3 scripts/bench/trace_summary.py $lt:50 $py:50 --ops --top 30 > $OUT/gru_ops.txt 2>&1
  ;;
 tests)
  cd build-gpu || exit 1
  for t in ${TESTS:-watch gpu dist}; do
    s=$(date +%s)
    case $t in
      watch) timeout 120 ./tests/nonfinite_watch_test > $OUT/t-$t.log 2>&1 ;;
      memsets) timeout 60 ./tests/graph_memsets_test > $OUT/t-$t.log 2>&1 ;;
      gpu) timeout 300 ./tests/gpu_train_test --gtest_filter="${GPU_FILTER:-TrainGpu.*}" > $OUT/t-$t.log 2>&1 ;;
      dist) timeout 300 ./tests/dist_train_test --gtest_filter="${DIST_FILTER:-DistTrainGpu.*}" > $OUT/t-$t.log 2>&1 ;;
      ddp) timeout 120 ./tests/ddp_test --gtest_filter='*Gpu.*' > $OUT/t-$t.log 2>&1 ;;
      shard) timeout 400 ./tests/shard_optimizer_test --gtest_filter='ShardOptimizerGpu.*' > $OUT/t-$t.log 2>&1 ;;
    esac
    echo "test $t rc=$? $(( $(date +%s) - s )) s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/t-$t.log | tr '\n' ' ' | cut -c1-300)"
  done
  cd .. || exit 1
  ;;
 clipsync)
  gcc -shared -fPIC -O2 -o /tmp/synctrace.so scripts/bench/synctrace.c -ldl
  for cfg in plain clip shard clip+shard; do
    extra=""
    case $cfg in clip) extra="--clip-grad-norm 0.5" ;; shard) extra="--shard-optimizer" ;; clip+shard) extra="--clip-grad-norm 0.5 --shard-optimizer" ;; esac
    SYNC_FROM=100000 LD_PRELOAD=/tmp/synctrace.so timeout 120 $B/trainctl local --nproc 2 --no-prefix -- $B/train --device cuda --epochs 1000 --max-steps 3000 --batch-size 64 --optimizer adamw --limit-test-samples 1000 --log-interval 100000 $extra > $OUT/cs.out 2> $OUT/cs.err
    echo "clipsync $cfg rc=$?: $(grep SYNCCOUNT $OUT/cs.err | tr '\n' ' ') $(grep -o 'training step: .*' $OUT/cs.err | head -1 | cut -c1-160) $(grep -o '"steps":[0-9]*' $OUT/cs.out | tail -1)"
  done
  rm -f $OUT/cs.out $OUT/cs.err
  ;;
 zero)
  s=$(date +%s)
  timeout ${ZERO_TIMEOUT:-300} python3 scripts/bench/shard_optimizer.py --device cuda --workload transformer --world ${WORLDS:-2,4} --rounds ${ZERO_ROUNDS:-2} --build $B > $OUT/zero.txt 2>&1
  echo "zero rc=$? $(( $(date +%s) - s )) s"; tail -12 $OUT/zero.txt
  ;;
 four)
  s=$(date +%s)
  timeout ${FOUR_TIMEOUT:-500} python3 scripts/bench/three_workloads.py --build build-gpu --workloads ${WORKLOADS:-mnist,resnet18,transformer,gru} --nproc ${NPROCS:-1,2,4} --precisions ${PRECISIONS:-fp32} --modes ${MODES:-eager,graph} --budget-s ${FOUR_BUDGET:-440} --results $OUT/four.jsonl > $OUT/four.txt 2>&1
  echo "four rc=$? $(( $(date +%s) - s )) s"; grep -v '^{' $OUT/four.txt | tail -40
  ;;
 scale)
  gcc -shared -fPIC -O2 -o /tmp/synctrace.so scripts/bench/synctrace.c -ldl
  st=${SCALE_STEPS:-1000}
  for r in $(seq ${ROUNDS:-2}); do
   for cfg in ${SCALE_CFGS:-1:default 2:default 2:nccl 4:default 4:peer 4:peergloo}; do
    n=${cfg%%:*}; v=${cfg#*:}
    envs=""; key=${v%%:*}
    case $v in *:env=*) envs=${v#*:env=}; envs=${envs//,/ } ;; esac
    case $key in default|old) fl="" ;; nccl) fl="--backend nccl" ;; peer) fl="--peer-allreduce on" ;; peergloo) fl="--peer-allreduce on --backend gloo" ;;
      env=*) fl=""; envs=${key#env=}; envs=${envs//,/ } ;; esac
    [ $n -gt $(nvidia-smi -L | wc -l) ] && continue
    SB=$B; [ $key = old ] && SB=${OLD_B:?set OLD_B to the bin folder of an older build}
    for wl in ${SCALE_WORKLOADS:-gru mnist}; do
      if [ $wl = gru ]; then
        cmd="$SB/gru_bench --features 4 --hidden 32 --seq-len 32 --train-sequences $((st * 64 * n)) --eval-sequences 128"
      else
        cmd="$SB/train --data $TRAIN_FASHION_MNIST_DIR --limit-train-samples $((st * 64 * n < 60000 ? st * 64 * n : 60000)) --limit-test-samples 1000"
      fi
      env $envs SYNC_FROM=100000 LD_PRELOAD=/tmp/synctrace.so timeout 120 $B/trainctl local --nproc $n --no-prefix -- $cmd --device cuda --batch-size 64 --epochs 3 --tf32 off --precision fp32 --seed 1 --log-interval ${SCALE_LOGI:-1000000} $fl > $OUT/sc.out 2> $OUT/sc.err
      echo "scale round $r $wl $n GPU(s) $v rc=$?: $(grep -o '"images_per_sec_steady":[0-9.]*\|"epoch_images_per_sec":[0-9.]*' $OUT/sc.out | tr '\n' ' ') syncs/rank $(grep -o 'SYNCCOUNT.*' $OUT/sc.err | head -1 | cut -c1-80) | $(grep -o 'backend [a-z]*' $OUT/sc.err | head -1) | $(grep -o '[0-9]* of [0-9]* gradient buckets.*' $OUT/sc.err | head -1 | cut -c1-150)"
      # with SCALE_LOGI: the progress lines' rates inside the epochs (lines 3+ of an epoch: the host waits for the line before last)
      [ -n "${SCALE_LOGI:-}" ] && echo "  lines: $(cat $OUT/sc.out $OUT/sc.err | grep -o 'Train Epoch: [0-9]* .*' | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /\/s$/) print $3, $4, $(i-1) }' | awk '{ n[$1]++; if (n[$1] >= 3) print $3 }' | sort -n | awk '{ a[NR] = $1 } END { if (NR) printf "median %s of %d (min %s max %s)", a[int((NR + 1) / 2)], NR, a[1], a[NR] }')"
    done
   done
  done
  rm -f $OUT/sc.out $OUT/sc.err
  ;;
 gruprof2)
  rm -rf /tmp/prof2 && mkdir -p /tmp/prof2
  for n in 1 2; do
    gb=${GRUPROF_BATCH:-64}
    timeout 120 $B/trainctl local --nproc $n --no-prefix -- $B/gru_bench --device cuda --batch-size $gb --epochs 1 --train-sequences $((1000 * gb * n)) --max-steps 400 --log-interval 1000000 --tf32 off --profile /tmp/prof2/w$n --profile-steps 300:349 > $OUT/g2.out 2> $OUT/g2.err; echo "gruprof2 $n GPU(s) rc=$?"
  done
  python3 scripts/bench/trace_summary.py /tmp/prof2/w1/trace-rank0.json:50 /tmp/prof2/w2/trace-rank0.json:50 /tmp/prof2/w2/trace-rank1.json:50 --span --top 30 > $OUT/gru2_kernels.txt 2>&1; head -45 $OUT/gru2_kernels.txt
  (cd /tmp/prof2 && tar czf $OUT/gru2_traces.tgz w1/trace-rank0.json w2/trace-rank0.json w2/trace-rank1.json)
  ;;
 prof)
  # profiles of one workload (PROF_WL: gru or mnist, batch PROF_BATCH) at PROF_NPROCS GPUs, steps 300-349
  rm -rf /tmp/prof && mkdir -p /tmp/prof
  pb=${PROF_BATCH:-64}; specs=""
  for n in ${PROF_NPROCS:-1 2}; do
    [ $n -gt $(nvidia-smi -L | wc -l) ] && continue
    if [ ${PROF_WL:-mnist} = gru ]; then
      cmd="$B/gru_bench --train-sequences $((1000 * pb * n))"
    else
      cmd="$B/train --data $TRAIN_FASHION_MNIST_DIR --limit-test-samples 1000"
    fi
    timeout 120 $B/trainctl local --nproc $n --no-prefix -- $cmd --device cuda --batch-size $pb --epochs 20 --max-steps 400 --log-interval 1000000 --tf32 off --profile /tmp/prof/w$n --profile-steps 300:349 ${PROF_FLAGS:-} > $OUT/p.out 2> $OUT/p.err; echo "prof ${PROF_WL:-mnist} $n GPU(s) rc=$?"
    specs="$specs /tmp/prof/w$n/trace-rank0.json:50"; [ $n -gt 1 ] && specs="$specs /tmp/prof/w$n/trace-rank$((n - 1)).json:50"
  done
  python3 scripts/bench/trace_summary.py $specs --span --top 30 > $OUT/prof_${PROF_WL:-mnist}.txt 2>&1; head -50 $OUT/prof_${PROF_WL:-mnist}.txt
  (cd /tmp/prof && tar czf $OUT/prof_${PROF_WL:-mnist}.tgz $(cd /tmp/prof && ls */trace-rank*.json))
  ;;
 boundary)
  rm -rf /tmp/bd && mkdir -p /tmp/bd
  for n in ${BOUNDARY_NPROCS:-1 4}; do
    [ $n -gt $(nvidia-smi -L | wc -l) ] && continue
    timeout 120 $B/trainctl local --nproc $n --no-prefix -- $B/gru_bench --train-sequences $((300 * 64 * n)) --eval-sequences 128 --epochs 3 --device cuda --batch-size 64 --tf32 off --seed 1 --log-interval 1000000 --metrics /tmp/bd/m$n.jsonl --profile /tmp/bd/w$n --profile-steps 595:605 ${BOUNDARY_FLAGS:-} > $OUT/bd.out 2> $OUT/bd.err
    echo "boundary $n GPU(s) rc=$?: ms per epoch $(python3 -c "
import json, sys
e = [r for r in map(json.loads, (l for l in open(sys.argv[1]) if l.startswith('{'))) if r.get('event') == 'epoch']
print(' '.join('%.2f' % (r['epoch_seconds'] * 1e3) for r in e))" /tmp/bd/m$n.jsonl)"
    ranks="/tmp/bd/w$n/trace-rank0.json"; [ $n -gt 1 ] && ranks="$ranks /tmp/bd/w$n/trace-rank$((n - 1)).json"
    python3 scripts/bench/trace_summary.py $ranks --idle 20 --top 6
  done
  (cd /tmp/bd && tar czf $OUT/boundary.tgz $(ls w*/trace-rank*.json)); rm -f $OUT/bd.out $OUT/bd.err
  ;;
 epochs)
  for r in $(seq ${ROUNDS:-2}); do
   for cfg in ${EPOCH_CFGS:-gru:1:DEFAULT=1 gru:4:DEFAULT=1 mnist:1:DEFAULT=1 mnist:4:DEFAULT=1}; do
    IFS=: read -r wl n vars variant <<< "$cfg"
    case ${variant:-} in nccl) fl="--backend nccl" ;; peergloo) fl="--peer-allreduce on --backend gloo" ;; *) fl="" ;; esac
    [ $n -gt $(nvidia-smi -L | wc -l) ] && continue
    if [ $wl = gru ]; then
      cmd="$B/gru_bench --train-sequences $((300 * 64 * n)) --eval-sequences 128 --epochs 6"
    else
      cmd="$B/train --data $TRAIN_FASHION_MNIST_DIR --limit-test-samples 1000 --epochs 5"
    fi
    rm -f /tmp/ep.jsonl
    env ${vars//,/ } timeout 120 $B/trainctl local --nproc $n --no-prefix -- $cmd --device cuda --batch-size 64 --tf32 off --seed 1 --log-interval 1000000 --metrics /tmp/ep.jsonl $fl > $OUT/ep.out 2> $OUT/ep.err
    echo "epochs round $r $wl $n GPU(s) $vars ${variant:-} rc=$?: $(python3 -c "
import json, sys
e = [r for r in map(json.loads, (l for l in open(sys.argv[1]) if l.startswith('{'))) if r.get('event') == 'epoch']
s = [r['epoch_images_per_sec'] for r in e[1:]]
print('steady %.0f /s, ms per epoch: ' % (sum(s) / max(1, len(s))) + ' '.join('%.1f' % (r['epoch_seconds'] * 1e3) for r in e))" /tmp/ep.jsonl)"
   done
  done
  rm -f $OUT/ep.out $OUT/ep.err /tmp/ep.jsonl
  ;;
 split)
  # a step's cost and an epoch end's apart: MNIST at SPLIT_NPROCS GPUs, batch 64, each epoch's ms at
  # two epoch lengths (SPLIT_SAMPLES), --backend auto against --backend nccl, ROUNDS= times
  for r in $(seq ${ROUNDS:-2}); do
   for n in ${SPLIT_SAMPLES:-15360 60000}; do
    for fl in "" "--backend nccl"; do
     rm -f /tmp/ep.jsonl
     timeout 120 $B/trainctl local --nproc ${SPLIT_NPROCS:-4} --no-prefix -- $B/train --data $TRAIN_FASHION_MNIST_DIR --limit-train-samples $n --limit-test-samples 1000 --epochs 6 --device cuda --batch-size 64 --tf32 off --seed 1 --log-interval 1000000 --metrics /tmp/ep.jsonl $fl > $OUT/ep.out 2> $OUT/ep.err
     echo "split round $r $n samples ${fl:-auto} rc=$? $(grep -o 'backend [a-z]*' $OUT/ep.err | head -1): $(python3 -c "
import json, sys
e = [r for r in map(json.loads, (l for l in open(sys.argv[1]) if l.startswith('{'))) if r.get('event') == 'epoch']
ms = sorted(r['epoch_seconds'] * 1e3 for r in e[1:])
print('median of the steady epochs %.2f ms, each: ' % ms[len(ms) // 2] + ' '.join('%.2f' % (r['epoch_seconds'] * 1e3) for r in e))" /tmp/ep.jsonl)"
    done
   done
  done
  rm -f $OUT/ep.out $OUT/ep.err /tmp/ep.jsonl
  ;;
 snap2)
  for r in 1 2; do for e in auto 0; do
    rm -rf /tmp/snapck /tmp/snapshm
    TRAIN_SNAPSHOT_DIR=/tmp/snapshm timeout 120 $B/trainctl local --nproc 2 --no-prefix -- $B/train --device cuda --epochs 1000 --max-steps ${SNAP_STEPS:-40000} --batch-size 64 --limit-test-samples 1000 --log-interval 100000 --checkpoint-dir /tmp/snapck --checkpoint-every 100000 --snapshot-every $e > $OUT/s2.out 2> $OUT/s2.err
    echo "snap2 round $r every $e rc=$?: $(grep '"event"' $OUT/s2.out | tail -1 | grep -o '"images_per_sec_steady":[0-9.]*\|"train_seconds":[0-9.]*\|"snapshots":[0-9]*\|"snapshot_seconds":[0-9.e-]*\|"snapshot_write_seconds":[0-9.e-]*' | tr '\n' ' ')"
  done; done
  rm -f $OUT/s2.out $OUT/s2.err
  ;;
 snap)
  for r in 1 2; do for e in auto 0; do
    rm -rf /tmp/snapck /tmp/snapshm
    TRAIN_SNAPSHOT_DIR=/tmp/snapshm timeout 120 $B/trainctl local --nproc 2 --no-prefix -- $B/train --device cuda --epochs 3 --batch-size 64 --limit-test-samples 1000 --log-interval 100000 --checkpoint-dir /tmp/snapck --snapshot-every $e > $OUT/snap-$r-$e.out 2> $OUT/snap-$r-$e.err
    echo "snap round $r every $e rc=$?: $(tail -1 $OUT/snap-$r-$e.out | grep -o '"images_per_sec_steady":[0-9.]*\|"train_seconds":[0-9.]*\|"snapshots":[0-9]*\|"snapshot_seconds":[0-9.e-]*\|"snapshot_write_seconds":[0-9.e-]*\|"params_sha256":"[0-9a-f]\{12\}' | tr '\n' ' ')"
  done; done
  ;;
 esac
done
