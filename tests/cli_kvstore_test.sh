#!/bin/bash
# inferx kv-store on a store folder: counts, a block that fails its checks
# (found by --verify, exit 1; deleted by --repair), --clear, bad usage.
# usage: cli_kvstore_test.sh INFERX_BINARY SCRATCH_DIR
set -euo pipefail
bin=$1
dir=$2/kvstore_cli
rm -rf "$dir"
fail() { echo "FAIL: $*"; exit 1; }

# not a store: no lock file, and nothing is created there
mkdir -p "$dir/plain"
if "$bin" kv-store --stats "$dir/plain" 2>"$dir/err"; then fail "a plain folder was taken for a store"; fi
grep -q "not a KV store directory" "$dir/err" || fail "no reason given: $(cat "$dir/err")"
[ ! -e "$dir/plain/lock" ] || fail "kv-store made a lock file in a plain folder"

# a store with one block file that is garbage
s=$dir/store
mkdir -p "$s/tmp" "$s/0000000000000007/0000000000000001/ab"
: >"$s/lock"
printf 'not a block at all' >"$s/0000000000000007/0000000000000001/ab/ab00000000000001.kvb"
printf 'half' >"$s/tmp/1-1.tmp"
out=$("$bin" kv-store --stats "$s" --json)
[[ $out == *'"blocks": 1'* && $out == *'"models": 1'* && $out == *'"tenants": 1'* && $out == *'"temporary": 1'* ]] ||
    fail "stats: $out"
if "$bin" kv-store --verify "$s" >"$dir/out"; then fail "--verify passed a bad block"; fi
grep -q "0 good, 1 bad" "$dir/out" || fail "verify: $(cat "$dir/out")"
"$bin" kv-store --verify --repair "$s" >"$dir/out" || fail "--repair failed"
grep -q "(deleted)" "$dir/out" || fail "repair: $(cat "$dir/out")"
out=$("$bin" kv-store --verify "$s" --json)
[[ $out == *'"blocks": 0'* ]] || fail "after repair: $out"
out=$("$bin" kv-store --clear "$s" --json)
[[ $out == *'"deleted": 0'* ]] || fail "clear: $out"

# usage errors exit 2
set +e
"$bin" kv-store "$s" 2>/dev/null; [ $? -eq 2 ] || fail "no action accepted"
"$bin" kv-store --stats --clear "$s" 2>/dev/null; [ $? -eq 2 ] || fail "two actions accepted"
"$bin" kv-store --repair "$s" 2>/dev/null; [ $? -eq 2 ] || fail "--repair without --verify accepted"
set -e
rm -rf "$dir"
echo "cli_kvstore: ok"
