#!/usr/bin/env bash
# The custom_model example built and run as a user does: installed into a temp prefix, built against
# it alone, trained on 2 local ranks, stopped by USR2 and resumed bit for bit, and submitted with a
# `trainctl sbatch --program` wrapper. CTest runs one STEP per test (tests/CMakeLists.txt).
# usage: example.sh STEP BUILD_DIR SOURCE_DIR   STEP: setup | learn | resume | slurm | cleanup
set -euo pipefail
step=$1
build=$(cd "$2" && pwd)
src=$(cd "$3" && pwd)
work=$build/test-tmp/example
prefix=$work/prefix
exe=$work/build/custom_model
trainctl=$prefix/bin/trainctl
data=$work/data

fail() { echo "FAIL: $*" >&2; exit 1; }
# The value of "KEY" in a one-line JSON object (numbers and strings).
json() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$2"; }
# The test runs as its own job: nothing of an enclosing SLURM job or launcher may leak in.
for v in $(compgen -e); do
  case $v in SLURM_CONF) ;; SLURM_* | SLURMD_* | SRUN_* | SBATCH_*) unset "$v" ;; esac
done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT TRAIN_FAULT_SIGNAL_AT_STEP

# Two local ranks, one thread each, 2 epochs of 4096 images (64 steps an epoch). Sets rc and line
# (the program's last stdout line: the done or preempted line).
run_local() {
  local tag=$1
  shift
  rc=0
  "$trainctl" local --nproc 2 --no-prefix -- "$exe" --data "$data" --epochs 2 --threads 1 --log-interval 16 "$@" \
    >"$work/$tag.out" 2>"$work/$tag.err" || rc=$?
  line=$(tail -n 1 "$work/$tag.out")
}

case $step in
setup)
  rm -rf "$work"
  mkdir -p "$work"
  cmake --install "$build" --prefix "$prefix" >"$work/install.log"

  # The installed headers are exactly the components' public include/ folders: nothing from src/,
  # no detail or private headers, and none that includes Gloo, c10d, spdlog, CLI11 or nlohmann.
  (cd "$prefix/include" && find . -type f | sort) >"$work/headers.installed"
  for d in libtrain/base libtrain libtrain/builtin launcher datasets/catalog datasets/images datasets models; do (cd "$src/$d/include" && find . -type f); done |
    sort >"$work/headers.public"
  diff "$work/headers.public" "$work/headers.installed" ||
    fail "installed headers (right) differ from the public include/ folders (left)"
  # train/details/ and train/base/details/ follow spdlog's convention for what a public header must
  # name but isn't API (it declares names only); a detail/, private or *_impl header would be internals.
  ! grep -E '(/detail/|detail\.h|private|_impl)' "$work/headers.installed" || fail "a detail/private header is installed"
  ! grep -vE '^\./train/(base/)?details/[a-z_]+\.h$' "$work/headers.installed" | grep -q details ||
    fail "a details header outside train/details or train/base/details"
  ! grep -rlE '#include [<"](gloo/|torch/csrc/distributed/|spdlog/|CLI/|nlohmann/)' "$prefix/include" ||
    fail "an installed header includes a private dependency (listed above)"
  echo "installed headers: $(wc -l <"$work/headers.installed"), all public"
  # The installed programs start: train finds LibTorch through its install RPATH.
  "$prefix/bin/train" --version >"$work/train-version.out" 2>&1 || { cat "$work/train-version.out"; fail "installed bin/train doesn't start"; }
  "$trainctl" --help >/dev/null || fail "installed bin/trainctl doesn't start"
  # Both name the version of train/base/version.h, which project(VERSION) and so the package version file take.
  version=$(sed -n 's/^#define TRAIN_VERSION_STRING "\(.*\)"$/\1/p' "$prefix/include/train/base/version.h")
  [[ $version =~ ^0\.[0-9]+\.[0-9]+$ ]] || fail "train/base/version.h: expected a 0.x.y version, found '$version'"
  grep -qx "libtrain $version" "$work/train-version.out" || { cat "$work/train-version.out"; fail "train --version doesn't say libtrain $version"; }
  [ "$("$trainctl" --version)" = "trainctl $version" ] || fail "trainctl --version doesn't say trainctl $version"

  # The package version file (0.x: the same minor version only): asking for the installed minor
  # version or the exact version finds it; an older or newer minor version is refused with CMake's
  # own message.
  minor=${version%.*}
  older=0.$((${minor#0.} - 1)) newer=0.$((${minor#0.} + 1))
  for want in "$minor" "$version" "$older" "$newer"; do
    refused=0
    [ "$want" = "$older" ] || [ "$want" = "$newer" ] && refused=1
    # A refused version stops before the package's config, so that project needs no compiler.
    mkdir -p "$work/find-$want"
    printf 'cmake_minimum_required(VERSION 3.22)\nproject(find_version %s)\nfind_package(libtrain %s REQUIRED)\nmessage(STATUS "found libtrain ${libtrain_VERSION}")\n' \
      "$([ "$refused" = 1 ] && echo NONE || echo CXX)" "$want" >"$work/find-$want/CMakeLists.txt"
    rc=0
    cmake -S "$work/find-$want" -B "$work/find-$want/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
      >"$work/find-$want.log" 2>&1 || rc=$?
    msg=$(tr -s ' \n' '  ' <"$work/find-$want.log")
    if [ "$refused" = 1 ]; then
      [ "$rc" != 0 ] || fail "find_package(libtrain $want REQUIRED) accepted the installed $version"
      grep -q "Could not find a configuration file for package \"libtrain\" that is compatible with requested version \"$want\"" <<<"$msg" &&
        grep -q "libtrainConfig.cmake, version: $version" <<<"$msg" ||
        { cat "$work/find-$want.log"; fail "find_package(libtrain $want): expected CMake's message refusing version $version"; }
    else
      [ "$rc" = 0 ] && grep -q -- "-- found libtrain $version" "$work/find-$want.log" ||
        { tail -30 "$work/find-$want.log"; fail "find_package(libtrain $want REQUIRED) did not find the installed $version"; }
    fi
  done
  echo "find_package(libtrain $minor) and ($version) find $version; $older and $newer are refused"
  # train::datasets is a static library: its private TurboJPEG and libpng are on a consumer's link
  # line, so the package defines their targets (cmake/libtrainConfig.cmake.in finds them).
  mkdir -p "$work/find-images"
  printf 'cmake_minimum_required(VERSION 3.22)\nproject(find_images CXX)\nfind_package(libtrain %s REQUIRED)\nif(TARGET TurboJPEG::TurboJPEG AND TARGET PNG::PNG)\n  message(STATUS "image libraries: TurboJPEG::TurboJPEG PNG::PNG")\nendif()\n' \
    "$minor" >"$work/find-images/CMakeLists.txt"
  cmake -S "$work/find-images" -B "$work/find-images/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >"$work/find-images.log" 2>&1 &&
    grep -q -- "-- image libraries: TurboJPEG::TurboJPEG PNG::PNG" "$work/find-images.log" ||
    { tail -30 "$work/find-images.log"; fail "find_package(libtrain): expected the targets TurboJPEG::TurboJPEG and PNG::PNG, which train::datasets links"; }

  # A consumer whose CLI11 can't be found is told which package is missing and where to get it.
  rc=0
  cmake -S "$src/docs/examples/custom_model" -B "$work/no-cli11" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=TRUE >"$work/no-cli11.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "configuring without CLI11 succeeded"
  msg=$(tr -s ' \n' '  ' <"$work/no-cli11.log")  # CMake wraps the message
  grep -q "libtrain's package needs CLI11: expected .* Hint: install CLI11 (apt-get install libcli11-dev" <<<"$msg" ||
    { cat "$work/no-cli11.log"; fail "the message for a missing CLI11 doesn't name it with a hint"; }

  # With libtrain's prefix alone, the package finds Torch where libtrain's build did.
  want=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
  cmake -S "$src/docs/examples/custom_model" -B "$work/prefix-only" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    >"$work/prefix-only.log" 2>&1 || { tail -30 "$work/prefix-only.log"; fail "configuring with libtrain's prefix alone"; }
  # torch's config warns about kineto and CMAKE_CUDA_ARCHITECTURES where a user can do nothing about
  # it; libtrain's package config quiets both (cmake/libtrainConfig.cmake.in).
  ! grep -nE "library kineto not found|CMAKE_CUDA_ARCHITECTURES" "$work/prefix-only.log" ||
    fail "configuring against the package prints torch's kineto or CMAKE_CUDA_ARCHITECTURES warning (above)"
  got=$(sed -n 's/^-- custom_model: libtrain .*, Torch .* from //p' "$work/prefix-only.log")
  [ "$got" = "$want" ] || fail "the example found Torch at '$got', expected libtrain's own '$want'"
  # The build tree is a package too, without installing (export() in cmake/TrainInstall.cmake): its
  # targets name this build's libraries and the sources' include/ folders.
  mkdir -p "$work/find-build"
  printf 'cmake_minimum_required(VERSION 3.22)\nproject(find_build CXX)\nfind_package(libtrain %s REQUIRED)\nget_target_property(_inc train::train INTERFACE_INCLUDE_DIRECTORIES)\nmessage(STATUS "found libtrain ${libtrain_VERSION} in ${libtrain_DIR}, train::train includes ${_inc}")\n' \
    "$minor" >"$work/find-build/CMakeLists.txt"
  cmake -S "$work/find-build" -B "$work/find-build/build" -G Ninja -DCMAKE_PREFIX_PATH="$build" \
    >"$work/find-build.log" 2>&1 || { tail -30 "$work/find-build.log"; fail "find_package(libtrain) with CMAKE_PREFIX_PATH=$build"; }
  grep -qF -- "-- found libtrain $version in $build, train::train includes $src/libtrain/include" "$work/find-build.log" ||
    { tail -30 "$work/find-build.log"; fail "find_package(libtrain) from the build tree: expected $version in $build with the sources' headers"; }
  # The build the way the README says: libtrain's prefix and torch's, as a user passes them.
  torch_prefix=$(dirname "$want")
  launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache} CCACHE_BASEDIR=$work CCACHE_NOHASHDIR=1
  fi
  cmake -S "$src/docs/examples/custom_model" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix" \
    "${launcher[@]}" >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log"; fail "configuring the example"; }
  ! grep -nE "library kineto not found|CMAKE_CUDA_ARCHITECTURES" "$work/configure.log" ||
    fail "configuring the example prints torch's kineto or CMAKE_CUDA_ARCHITECTURES warning (above)"
  cmake --build "$work/build" >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; fail "building the example"; }

  "$exe" --make-data "$data"
  [ "$(head -c 8 "$data/train.stripes")" = LTSTRIPE ] || fail "$data/train.stripes has no LTSTRIPE magic"
  # A truncated file is refused with its name, the sizes and a hint.
  mkdir -p "$work/bad"
  head -c 1000 "$data/train.stripes" >"$work/bad/train.stripes"
  cp "$data/test.stripes" "$work/bad/"
  rc=0
  "$exe" --data "$work/bad" --epochs 1 >"$work/bad.out" 2>"$work/bad.err" || rc=$?
  [ "$rc" = 1 ] || fail "a truncated data file: expected exit 1, found $rc"
  grep -q "train.stripes: expected 1052704 bytes for 4096 images of 16x16, found 1000 (truncated?). Hint:" "$work/bad.err" ||
    { cat "$work/bad.err"; fail "the truncated file's message"; }
  # A program shows and accepts only the flags it honours: the recipe flags it reads
  # (--data, --lr, ...) are there; `train`'s others are unknown, with a hint, not silently ignored.
  "$exe" --help >"$work/help.out" || fail "custom_model --help failed"
  grep -q -- "--lr" "$work/help.out" || fail "custom_model --help doesn't list --lr, which it reads"
  ! grep -nE -- "--(model|dataset|optimizer|momentum|augment|list-models)\b" "$work/help.out" ||
    fail "custom_model --help lists a recipe flag it doesn't read (above)"
  rc=0
  "$exe" --data "$data" --model cifar10 >"$work/model.out" 2>"$work/model.err" || rc=$?
  [ "$rc" = 2 ] || fail "--model in a program that doesn't read it: expected exit 2, found $rc"
  grep -q -- "--model" "$work/model.err" && grep -q "add_recipe_flags" "$work/model.err" ||
    { cat "$work/model.err"; fail "the message for --model doesn't name it with a hint"; }
  echo "example built against $prefix, Torch from $got"
  ;;

learn)
  run_local learn
  [ "$rc" = 0 ] || { tail -20 "$work/learn.err"; fail "trainctl local exited $rc"; }
  [ "$(json event "$line")" = done ] && [ "$(json world_size "$line")" = 2 ] || fail "no done line for 2 ranks: $line"
  acc=$(json test_accuracy "$line")
  # 4 classes: chance is 0.25. A run that learns is near 0.9; 0.6 leaves a wide margin.
  awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' || fail "test accuracy $acc: expected well above chance (0.25), above 0.6"
  echo "2 ranks, 2 epochs: test accuracy $acc"
  ;;

resume)
  run_local reference --checkpoint-dir "$work/ck-reference"
  ref=$line
  [ "$rc" = 0 ] || { tail -20 "$work/reference.err"; fail "uninterrupted run exited $rc"; }
  want=$(json params_sha256 "$ref")
  # Stopped by USR2 right after step 40 on rank 1 (the ranks agree to stop), then after step 100
  # on rank 0 (in epoch 2); the third run finishes.
  for at in 40:USR2:1 100:USR2:0; do
    TRAIN_FAULT_SIGNAL_AT_STEP=$at run_local "stop-${at%%:*}" --checkpoint-dir "$work/ck"
    [ "$rc" = 75 ] || { tail -20 "$work/stop-${at%%:*}.err"; fail "USR2 at step ${at%%:*}: expected exit 75, found $rc"; }
    [ "$(json event "$line")" = preempted ] && [ "$(json steps "$line")" = "${at%%:*}" ] ||
      fail "USR2 at step ${at%%:*}: expected a preempted line at that step, found: $line"
  done
  grep -q "resumed from $work/ck/ckpt-40.pt" "$work/stop-100.err" || fail "the second run did not resume from step 40"
  run_local resumed --checkpoint-dir "$work/ck"
  [ "$rc" = 0 ] || { tail -20 "$work/resumed.err"; fail "the resumed run exited $rc"; }
  [ "$(json steps "$line")" = 128 ] || fail "expected 128 steps in all, found: $line"
  [ "$(json params_sha256 "$line")" = "$want" ] ||
    fail "resumed parameters differ from the uninterrupted run's: $(json params_sha256 "$line") vs $want"
  # The BatchNorm statistics are equal on all ranks, so evaluation after a resume is the same too.
  [ "$(json test_accuracy "$line")" = "$(json test_accuracy "$ref")" ] || fail "test accuracy differs after resume"
  echo "stopped at steps 40 and 100, resumed: params_sha256 $want, as uninterrupted"
  ;;

slurm)
  [ "${TRAIN_TEST_SLURM:-1}" != 0 ] || { echo "TRAIN_TEST_SLURM=0: skipped"; exit 77; }
  if [ -z "${SLURM_CONF:-}" ] && [ -f "$src/.slurm/slurm.conf" ]; then export SLURM_CONF=$src/.slurm/slurm.conf; fi
  command -v sbatch >/dev/null || fail "sbatch is not on PATH. Hint: install SLURM's client, or TRAIN_TEST_SLURM=0 skips this test."
  timeout 20 sinfo -h >/dev/null 2>&1 ||
    fail "sinfo doesn't answer (SLURM_CONF=${SLURM_CONF:-unset}). Hint: start the local cluster (scripts/local-slurm.sh start), or TRAIN_TEST_SLURM=0 skips this test."
  # Submitted from outside the checkout, as the C++ suites do: `trainctl status` there never lists it.
  jobdir=${TRAIN_TEST_JOB_DIR:-${TMPDIR:-/tmp}/libtrain-jobs-$(id -u)}/example-slurm-$$
  rm -rf "$jobdir"
  mkdir -p "$jobdir/logs"
  cd "$jobdir"
  # The preflight knows train's datasets, not the example's format, so the wrapper skips it.
  args=(--data "$data" --epochs 1 --threads 1 --log-interval 16)
  "$trainctl" sbatch --job-name custom-model --nodes 2 --ntasks-per-node 1 --time 10 --program "$exe" \
    --no-preflight --out job.sh -- "${args[@]}" 2>"$jobdir/sbatch-gen.err" ||
    { cat "$jobdir/sbatch-gen.err"; fail "trainctl sbatch --program"; }
  grep -q "^TRAIN_BIN='\{0,1\}$exe'\{0,1\}$" job.sh || fail "the wrapper doesn't run $exe"
  rc=0
  timeout 240 sbatch --parsable --wait job.sh >"$jobdir/sbatch.out" 2>"$jobdir/sbatch.err" || rc=$?
  id=$(head -n 1 "$jobdir/sbatch.out" | cut -d';' -f1)
  [ -n "$id" ] || { cat "$jobdir/sbatch.err"; fail "sbatch did not submit"; }
  if [ "$rc" = 124 ]; then
    scancel "$id" || true
    fail "job $id did not end within 240 s; cancelled it"
  fi
  log=$jobdir/logs/custom-model-$id.out
  [ "$rc" = 0 ] || { cat "$log" "$jobdir/sbatch.err"; fail "job $id: sbatch --wait exited $rc"; }
  line=$(tail -n 1 "$log")
  head -n 1 "$log" | grep -q "custom-model: job $id: 2 node(s) node\[1-2\]" || { cat "$log"; fail "the wrapper's summary line"; }
  [ "$(json event "$line")" = done ] && [ "$(json world_size "$line")" = 2 ] || { cat "$log"; fail "no done line for 2 ranks"; }
  acc=$(json test_accuracy "$line")
  awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }' || fail "test accuracy $acc after 1 epoch: expected above 0.5 (chance 0.25)"
  # The same arguments on 2 local ranks give the same parameters.
  "$trainctl" local --nproc 2 --no-prefix -- "$exe" "${args[@]}" >"$jobdir/local.out" 2>"$jobdir/local.err" ||
    { tail -20 "$jobdir/local.err"; fail "trainctl local reference"; }
  [ "$(json params_sha256 "$line")" = "$(json params_sha256 "$(tail -n 1 "$jobdir/local.out")")" ] ||
    fail "the job's parameters differ from trainctl local's with the same arguments"
  echo "job $id on node[1-2]: test accuracy $acc, parameters equal to trainctl local's"
  rm -rf "$jobdir"
  ;;

cleanup)
  rm -rf "$work"
  ;;

*)
  fail "step '$step': expected setup, learn, resume, slurm or cleanup. Hint: see the usage line at the top of $0."
  ;;
esac
