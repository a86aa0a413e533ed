#!/usr/bin/env bash
# inferx serve with a disk tier, end to end: a long prompt served, the server
# stopped (its cached blocks written to the folder), a new server on the same
# folder serves the prompt's prefix from disk (usage's cached tokens, the
# /metrics counters) with the same greedy text; kv-store checks the folder.
# usage: cli_serve_disk_test.sh INFERX_BINARY   (exit 77 without curl)
set -uo pipefail
bin=$1
. "$(dirname "$0")/cli_serve_lib.sh"
start() { serve_start --kv-disk-dir "$tmp/kv" --kv-disk-max 64M; }
stop() { serve_stop; }
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
