#!/usr/bin/env bash
# inferx serve with a disk tier, end to end: a long prompt served, the server
# stopped (its cached blocks written to the folder), a new server on the same
# folder serves the prompt's prefix from disk (usage's cached tokens, the
# /metrics counters) with the same greedy text; kv-store checks the folder.
# usage: cli_serve_disk_test.sh INFERX_BINARY   (exit 77 without curl)
set -uo pipefail
bin=$1
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- server log:"; cat "$tmp/err"; exit 1; }
start() {
  : >"$tmp/err"
  "$bin" serve --port 0 -t 2 --kv-disk-dir "$tmp/kv" --kv-disk-max 64M --access-log off 2>"$tmp/err" &
  pid=$!
  for _ in $(seq 600); do grep -q " on http://127.0.0.1:" "$tmp/err" 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/err")
  [ -n "$port" ] || fail "did not start"
  base=http://127.0.0.1:$port
}
stop() {
  kill -TERM $pid
  wait $pid || fail "exit status $? at SIGTERM"
  pid=""
}
prompt=$(printf 'Emma Woodhouse, handsome, clever, and rich, with a comfortable home %.0s' $(seq 8))
body="{\"prompt\":\"$prompt\",\"max_tokens\":12,\"temperature\":0}"

start
first=$(curl -sf "$base/v1/completions" -d "$body") || fail "first request"
grep -q '"kv_disk_dir\|KV disk tier' "$tmp/err" || fail "no disk tier in the log"
stop
out=$("$bin" kv-store --verify "$tmp/kv" --json) || fail "kv-store --verify: $out"
[[ $out == *'"bad": 0'* && $out != *'"blocks": 0'* ]] || fail "the folder after the first server: $out"

start
second=$(curl -sf "$base/v1/completions" -d "$body") || fail "request after the restart"
text1=$(sed -n 's/.*"text":"\([^"]*\)".*/\1/p' <<<"$first")
text2=$(sed -n 's/.*"text":"\([^"]*\)".*/\1/p' <<<"$second")
[ -n "$text1" ] && [ "$text1" == "$text2" ] || fail "the text changed: '$text1' vs '$text2'"
cached=$(sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p' <<<"$second")
[ "${cached:-0}" -ge 32 ] || fail "no cached prompt tokens after the restart: $second"
metrics=$(curl -sf "$base/metrics") || fail "metrics"
hit=$(sed -n 's/^inferx:kv_disk_hit_tokens_total{[^}]*} \([0-9.e+]*\)$/\1/p' <<<"$metrics")
[ "${hit%.*}" -ge 32 ] 2>/dev/null || fail "kv_disk_hit_tokens_total: '$hit'"
grep -q '^inferx:kv_disk_reload_decisions_total{.*decision="reload"' <<<"$metrics" || fail "no reload decisions"
stop
echo "cli_serve_disk: ok (cached $cached tokens after the restart)"
