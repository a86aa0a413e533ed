#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds examples/engine.c
# out of tree against it four ways -- pkg-config shared and static,
# find_package shared and static -- and runs each on the bundled model.
#   install_test.sh BUILD_DIR SOURCE_DIR CC [EXTRA_FLAGS]
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) cc=$3 extra=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/inferx include/inferx/engine.h lib/pkgconfig/inferx.pc lib/cmake/inferx/inferxConfig.cmake; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
so=$(readlink "$prefix/lib/libinferx.so")
soname=$(objdump -p "$prefix/lib/$so" | awk '/SONAME/ {print $2}')
echo "libinferx.so -> $so, SONAME $soname"
[ -n "$soname" ] || { echo "no SONAME"; exit 1; }
# (whole outputs captured first: with pipefail, grep -q leaving early would
# fail the pipe and hide a match)
syms=$(nm -D --defined-only "$prefix/lib/$so" | awk '{print $3}')
if grep -q '^ix__' <<<"$syms"; then
  echo "internal ix__ symbols exported"; exit 1
fi
model=$src/models/target-f16.gguf
run() { # name binary
  out=$(LD_LIBRARY_PATH="$prefix/lib" "$2" "$model" "Once upon a time")
  echo "$1: ${out##*$'\n'}"
  case $out in *"generated tokens]"*) ;; *) echo "$1: unexpected output: $out"; exit 1 ;; esac
}
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046,SC2086
"$cc" $extra -o "$tmp/pc_shared" "$src/examples/engine.c" $(pkg-config --cflags --libs inferx)
# shellcheck disable=SC2046,SC2086
"$cc" $extra -o "$tmp/pc_static" "$src/examples/engine.c" $(pkg-config --static --cflags inferx) \
  "$prefix/lib/libinferx.a" $(pkg-config --static --libs inferx | sed "s/-linferx//")
run "pkg-config, shared" "$tmp/pc_shared"
run "pkg-config, static" "$tmp/pc_static"
libs=$(ldd "$tmp/pc_static")
if grep -q libinferx <<<"$libs"; then echo "static build links libinferx.so"; exit 1; fi
cmake -S "$src/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" -DEXAMPLE_SOURCE="$src/examples/engine.c" >/dev/null
cmake --build "$tmp/cm" >/dev/null
run "find_package, shared" "$tmp/cm/app_shared"
run "find_package, static" "$tmp/cm/app_static"
echo "install test: passed"
