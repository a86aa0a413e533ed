#!/usr/bin/env bash
# inferx serve --keys-file, end to end (docs/server.md "Per-key policy"):
#   - a malformed keys file, or a corrupt usage state, stops it at once with
#     exit status 1 and a message naming the field
#   - requests/min over HTTP: 429 rate_limit_exceeded, Retry-After, the
#     x-ratelimit-* headers; the budget: 429 insufficient_quota
#   - the spent budget survives a restart (the usage state file written at
#     SIGTERM); /v1/usage; /metrics only for a key allowed to read it
#   - no secret in /metrics, the access log or stderr
#   - SIGHUP reads the keys file again (a bad one keeps the keys as they were)
# Limits are counted, never timed: 2 requests per minute, 30 tokens of budget.
# usage: cli_serve_keys_test.sh INFERX_BINARY   (exit 77 without curl)
set -uo pipefail
bin=$1
command -v curl >/dev/null || { echo "skip: curl is not installed"; exit 77; }
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; echo "--- server log:"; cat "$tmp/err" 2>/dev/null; exit 1; }
wait_for() { # pattern file seconds
  for _ in $(seq $(($3 * 10))); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

# ---- a bad keys file: exit 1 naming the field, before the model loads
bad() { # file-contents expected-message
  printf '%s' "$1" >"$tmp/bad.json"
  out=$(timeout 60 "$bin" serve --port 0 --keys-file "$tmp/bad.json" 2>&1)
  rc=$?
  [ $rc -eq 1 ] || fail "keys file '$1': exit status $rc, want 1: $out"
  grep -qF -- "$2" <<<"$out" || fail "keys file '$1': the message does not say '$2': $out"
}
bad '{"keys": [{"name": "a", "key": "sk-a", "tokens_per_minute": "lots"}]}' 'keys[0].tokens_per_minute: must be a positive integer'
bad '{"keys": [{"name": "a", "key": "sk-a", "color": "red"}]}' 'keys[0].color: unknown field'
bad '{"keys": [{"name": "a", "key": "sk-a"}, {"name": "a", "key": "sk-b"}]}' "keys[1].name: 'a' is also keys[0]'s"
bad '{"keys": [{"name": "a", "key": "sk-a"' 'line 1'
out=$(timeout 60 "$bin" serve --port 0 --usage-state "$tmp/u.json" 2>&1)
[ $? -eq 2 ] || fail "--usage-state without --keys-file: $out"
out=$(timeout 60 "$bin" serve --port 0 --keys-file "$tmp/nonexistent.json" 2>&1) && fail "a missing keys file was accepted"
grep -qF "nonexistent.json" <<<"$out" || fail "a missing keys file: $out"

# ---- a server with keys
secret_a=sk-alice-7f3e9
secret_ops=sk-ops-22c1
hash_ops=$(printf %s "$secret_ops" | sha256sum | cut -d' ' -f1)
cat >"$tmp/keys.json" <<EOF
{"keys": [
  {"name": "alice", "key": "$secret_a", "requests_per_minute": 2},
  {"name": "bud", "key": "sk-bud-91aa", "budget_tokens": 30},
  {"name": "ops", "key_sha256": "$hash_ops", "metrics": true}
]}
EOF
start() {
  : >"$tmp/err"
  "$bin" serve --port 0 -t 2 --keys-file "$tmp/keys.json" --access-log "$tmp/access.log" 2>"$tmp/err" &
  pid=$!
  wait_for " on http://127.0.0.1:" "$tmp/err" 60 || fail "did not start"
  port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$tmp/err")
  base=http://127.0.0.1:$port
}
stop() {
  kill -TERM $pid
  wait $pid || fail "exit status $? at SIGTERM"
  pid=""
}
post() { # key body -> headers in $tmp/h, body in $tmp/b, prints the status
  curl -s -o "$tmp/b" -D "$tmp/h" -w '%{http_code}' -H "Authorization: Bearer $1" "$base/v1/completions" -d "$2"
}
exact='{"prompt":[1,300,301,302,303,304,305,306,307,308],"max_tokens":20,"ignore_eos":true}'

start
[ "$(post $secret_a '{"prompt":"Emma","max_tokens":2}')" = 200 ] || fail "alice 1: $(cat "$tmp/b")"
grep -qi '^x-ratelimit-remaining-requests: 1' "$tmp/h" || fail "alice 1 headers: $(cat "$tmp/h")"
[ "$(post $secret_a '{"prompt":"Emma","max_tokens":2}')" = 200 ] || fail "alice 2: $(cat "$tmp/b")"
[ "$(post $secret_a '{"prompt":"Emma","max_tokens":2}')" = 429 ] || fail "alice 3 was not refused: $(cat "$tmp/b")"
grep -qF '"code":"rate_limit_exceeded"' "$tmp/b" || fail "alice 3 body: $(cat "$tmp/b")"
grep -qi '^retry-after: [0-9]' "$tmp/h" || fail "alice 3: no Retry-After: $(cat "$tmp/h")"
grep -qi '^x-ratelimit-limit-requests: 2' "$tmp/h" || fail "alice 3: no x-ratelimit-limit-requests"

[ "$(post sk-bud-91aa "$exact")" = 200 ] || fail "bud 1: $(cat "$tmp/b")"
[ "$(post sk-bud-91aa "$exact")" = 429 ] || fail "bud 2 was not refused: $(cat "$tmp/b")"
grep -qF '"code":"insufficient_quota"' "$tmp/b" || fail "bud 2 body: $(cat "$tmp/b")"

[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/metrics")" = 401 ] || fail "/metrics without a key"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $secret_a" "$base/metrics")" = 403 ] ||
  fail "/metrics for alice"
metrics=$(curl -sf -H "Authorization: Bearer $secret_ops" "$base/metrics") || fail "/metrics for ops"
grep -qF 'inferx:key_rejected_total{model_name="target-f16",key="alice",reason="requests_per_minute"} 1' <<<"$metrics" ||
  fail "/metrics: alice's refusal is not counted"
stop
[ -f "$tmp/keys.json.usage.json" ] || fail "no usage state beside the keys file"
for secret in "$secret_a" "$secret_ops" sk-bud-91aa; do
  ! grep -qF "$secret" "$tmp/access.log" "$tmp/err" "$tmp/keys.json.usage.json" || fail "the secret $secret was written"
  ! grep -qF "$secret" <<<"$metrics" || fail "/metrics shows the secret $secret"
done

# ---- a restart: the budget is still spent
start
[ "$(post sk-bud-91aa "$exact")" = 429 ] || fail "bud after a restart was not refused: $(cat "$tmp/b")"
usage=$(curl -sf -H "Authorization: Bearer sk-bud-91aa" "$base/v1/usage") || fail "/v1/usage"
grep -qF '"spent":30' <<<"$usage" || fail "/v1/usage after a restart: $usage"
stop

# ---- SIGHUP reads the keys file again: a bad one keeps the keys, a good one applies
start
cp "$tmp/keys.json" "$tmp/keys.good"
echo '{"keys": [{"name": "alice", "key": 5}]}' >"$tmp/keys.json"
kill -HUP $pid
wait_for "the keys stay as they were" "$tmp/err" 30 || fail "no message for a bad keys file at SIGHUP"
grep -qF 'keys[0].key: must be' "$tmp/err" || fail "the SIGHUP message does not name the field"
[ "$(post $secret_a '{"prompt":"Emma","max_tokens":2}')" = 200 ] || fail "alice after a bad reload: $(cat "$tmp/b")"
sed 's/"sk-bud-91aa", "budget_tokens": 30/"sk-bud-91aa", "budget_tokens": 1000/' "$tmp/keys.good" >"$tmp/keys.json"
kill -HUP $pid
wait_for "reloaded the keys file" "$tmp/err" 30 || fail "no reload at SIGHUP"
[ "$(post sk-bud-91aa "$exact")" = 200 ] || fail "bud with a raised budget: $(cat "$tmp/b")"
stop

# ---- a corrupt usage state stops it
echo '{"version": 1, "keys": ' >"$tmp/keys.json.usage.json"
out=$(timeout 60 "$bin" serve --port 0 --keys-file "$tmp/keys.json" 2>&1) && fail "a corrupt usage state was accepted"
grep -qF "delete it to start every budget from zero" <<<"$out" || fail "corrupt usage state: $out"
echo "ok"
