#!/usr/bin/env bash
# `pip install ./python` into a fresh virtual environment, offline (pip may
# not reach an index), then the installed package loads the library and
# generates.   pip_install_test.sh SOURCE_DIR LIBINFERX MODEL
set -euo pipefail
src=$1 lib=$2 model=$3
py=/usr/bin/python3
[ -x $py ] || py=python3
if ! $py -c 'import venv, ensurepip' 2>/dev/null; then
  echo "SKIP: python3-venv is not installed (scripts/setup installs it)"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$py -m venv "$tmp/venv"
cp -r "$src/python" "$tmp/src" # pip builds in place; keep the checkout clean
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$tmp/venv/bin/pip" install -q "$tmp/src"
cd "$tmp"
INFERX_LIBRARY=$lib "$tmp/venv/bin/python" - "$model" <<'PY'
import sys, inferx
m = inferx.Model(sys.argv[1])
with inferx.Engine(m, kv_mem_mb=16) as e:
    r = e.generate("Emma was", max_tokens=8, temperature=0)
assert r.usage["completion_tokens"] == 8, r
assert inferx.__file__.startswith(sys.prefix), inferx.__file__
print("installed inferx", inferx.__version__, "->", repr(r.text))
PY
