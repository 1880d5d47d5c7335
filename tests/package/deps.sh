#!/usr/bin/env bash
# Configuring libtrain where users can't apt-get: a missing dependency is named with what it is for
# and how to get it, and a non-root user configures with every dependency from a prefix folder
# (CMake's system folders switched off, so nothing comes from /usr by accident).
# usage: deps.sh STEP BUILD_DIR SOURCE_DIR   STEP: missing | nonroot
set -euo pipefail
step=$1
build=$(cd "$2" && pwd)
src=$(cd "$3" && pwd)
work=$build/test-tmp/deps-$step
fail() { echo "FAIL: $*" >&2; exit 1; }
# CMake wraps long messages; compare with the whitespace folded.
folded() { tr -s ' \n' '  ' <"$1"; }
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
[ -n "$torch_dir" ] || fail "$build/CMakeCache.txt: expected Torch_DIR, found none. Hint: configure the build first (scripts/build.sh)."
rm -rf "$work"
mkdir -p "$work"

case $step in
missing)
  # CLI11 hidden: configure stops at once, naming it, its use, and where to get it.
  rc=0
  cmake -S "$src" -B "$work/build" -G Ninja -DTorch_DIR="$torch_dir" -DTRAIN_USE_CCACHE=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=TRUE >"$work/configure.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "configure without CLI11 succeeded"
  msg=$(folded "$work/configure.log")
  for want in "libtrain: dependency CLI11 not found. It is needed for the command lines of train and trainctl." \
              "found none (CMAKE_DISABLE_FIND_PACKAGE_CLI11 is set)" \
              "Hint: without root, install it into a prefix you own (conda install -c conda-forge cli11; spack install cli11;" \
              "with root on Debian/Ubuntu: apt-get install libcli11-dev."; do
    grep -qF "$want" <<<"$msg" || { cat "$work/configure.log"; fail "the message lacks: $want"; }
  done
  echo "a missing CLI11 is named, with its use and how to get it"
  rm -rf "$work"
  ;;

nonroot)
  command -v dpkg >/dev/null || { echo "no dpkg: this test builds its prefix from Debian's packages; skipped"; exit 77; }
  # The prefix: the files of the Debian -dev packages (and the libraries their .so links name),
  # laid out as `cmake --install` of each project into one prefix would lay them out.
  prefix=$work/prefix
  add_package() {
    local f rel target name
    dpkg -L "$1" >/dev/null 2>&1 || fail "package $1 is not installed. Hint: scripts/setup.sh installs it."
    while read -r f; do
      case $f in /usr/share/doc/* | /usr/share/lintian/*) continue ;; /usr/*) ;; *) continue ;; esac
      [ -d "$f" ] && continue
      rel=${f#/usr/}
      mkdir -p "$prefix/$(dirname "$rel")"
      if [ -L "$f" ]; then
        # libfoo.so -> libfoo.so.1.2.3 (from the runtime package): the link and the library both.
        target=$(readlink -f "$f")
        cp -L "$target" "$prefix/$(dirname "$rel")/$(basename "$target")"
        [ "$(basename "$target")" = "$(basename "$f")" ] || ln -sf "$(basename "$target")" "$prefix/$rel"
        # and the soname links (libfoo.so.1.2, libfoo.so.1), which the loader looks for
        name=$(basename "$target")
        while [[ $name == *.so.*.* ]]; do
          name=${name%.*}
          [ -e "$prefix/$(dirname "$rel")/$name" ] || ln -s "$(basename "$target")" "$prefix/$(dirname "$rel")/$name"
        done
      else
        cp "$f" "$prefix/$rel"
      fi
    done < <(dpkg -L "$1")
  }
  for p in libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libssl-dev libturbojpeg0-dev libpng-dev \
    libgtest-dev; do add_package "$p"; done

  # The user: nobody (65534) when the test runs as root, else the user running it.
  mkdir -p "$work/home" "$work/build"
  as_user=()
  if [ "$(id -u)" = 0 ]; then
    command -v setpriv >/dev/null || { echo "no setpriv to drop root; skipped"; exit 77; }
    chown -R 65534:65534 "$work/home" "$work/build"
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  fi
  # A CUDA build of torch needs the CUDA toolkit, which a cluster's `module load cuda` provides; with
  # the system folders off, CMake is told where it is as the module's variables would.
  cuda=()
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
  if [ -n "$nvcc" ]; then
    cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    cuda=(-DCUDA_TOOLKIT_ROOT_DIR="$cuda_root" -DCUDAToolkit_ROOT="$cuda_root" -DCMAKE_CUDA_COMPILER="$cuda_root/bin/nvcc")
  fi
  configure() {
    "${as_user[@]}" env -i PATH="$PATH" HOME="$work/home" sh -c 'echo "configuring as uid $(id -u)"; exec "$@"' sh \
      cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_MAKE_PROGRAM="$(command -v ninja)" \
      -DCMAKE_CXX_COMPILER="$(command -v c++)" -DTRAIN_USE_CCACHE=OFF -DTorch_DIR="$torch_dir" \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=FALSE \
      -DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=FALSE -DCMAKE_FIND_USE_PACKAGE_REGISTRY=FALSE "${cuda[@]}"
  }

  # Without Gloo's headers in the prefix: configure says which dependency and how to get it.
  rc=0
  configure >"$work/no-gloo.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] || { cat "$work/no-gloo.log"; fail "configure succeeded with no Gloo headers anywhere"; }
  grep -q "configuring as uid [1-9]" "$work/no-gloo.log" || fail "configure ran as root"
  msg=$(folded "$work/no-gloo.log")
  grep -qF "libtrain: dependency Gloo (headers only) not found." <<<"$msg" &&
    grep -qF "Hint: without root, put gloo's headers into a prefix you own" <<<"$msg" ||
    { cat "$work/no-gloo.log"; fail "the message for missing Gloo headers"; }

  add_package libgloo-dev
  configure >"$work/configure.log" 2>&1 || { tail -40 "$work/configure.log"; fail "configure with every dependency in $prefix"; }
  # Every dependency came from the prefix (or Torch from its venv), none from /usr.
  for var in spdlog_DIR CLI11_DIR nlohmann_json_DIR GTest_DIR TRAIN_GLOO_INCLUDE_DIR ZLIB_INCLUDE_DIR OPENSSL_INCLUDE_DIR \
    TurboJPEG_INCLUDE_DIR TurboJPEG_LIBRARY PNG_PNG_INCLUDE_DIR; do
    value=$(sed -n "s/^$var:[A-Z]*=//p" "$work/build/CMakeCache.txt")
    case $value in "$prefix"/*) ;; *) fail "$var='$value': expected a folder under $prefix" ;; esac
  done
  echo "configured as uid $(stat -c %u "$work/build/CMakeCache.txt") with every dependency from $prefix"
  [ -n "${TRAIN_KEEP_TEST_TMP:-}" ] || rm -rf "$work"  # kept on request, e.g. to build there by hand
  ;;

*)
  fail "step '$step': expected missing or nonroot. Hint: see the usage line at the top of $0."
  ;;
esac
