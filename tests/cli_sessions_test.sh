#!/usr/bin/env bash
# Sessions and stored responses across a restart of inferx serve, end to end:
# a chat turn pinned under a session_id and saved to the disk tier, a stored
# response; the server stopped with SIGTERM and started again on the same
# folder; the session is still there (its blocks on disk), the same turn
# gives the same greedy text with its prompt served from disk, the stored
# response is still readable and can be continued (previous_response_id);
# the other tenant still sees neither; deleting the session removes it.
# usage: cli_sessions_test.sh INFERX_BINARY   (exit 77 without curl)
set -euo pipefail
bin=$1
. "$(dirname "$0")/cli_serve_lib.sh"
start() {
  serve_start --kv-disk-dir "$tmp/kv" --api-key key-a --api-key key-b --session-ttl 600
  for _ in $(seq 600); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "$base/ready" || true)
    [ "$code" = 200 ] && break
    sleep 0.1
  done
}
stop() { serve_stop; }
# req KEY METHOD PATH [BODY]: prints "STATUS BODY"
req() {
  local out
  out=$(curl -s -w '\n%{http_code}' -X "$2" -H "Authorization: Bearer $1" "$base$3" ${4:+-d "$4"}) || fail "curl $2 $3"
  echo "$(tail -n1 <<<"$out") $(sed '$d' <<<"$out")"
}
field() { sed -n "s/.*\"$1\":\"\\{0,1\\}\\([^\",}]*\\).*/\\1/p" <<<"$2" | head -n1; }

text="Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to unite"
chat="{\"messages\":[{\"role\":\"user\",\"content\":\"$text\"}],\"max_tokens\":12,\"temperature\":0,\"session_id\":\"novel-1\"}"

start
first=$(req key-a POST /v1/chat/completions "$chat")
[[ $first == 200* ]] || fail "first turn: $first"
saved=$(req key-a POST /v1/sessions/novel-1/save)
[[ $saved == 200* ]] || fail "save: $saved"
blocks=$(field blocks "$saved")
[ "$(field blocks_disk "$saved")" = "$blocks" ] && [ "${blocks:-0}" -ge 2 ] || fail "not all on disk: $saved"
r1=$(req key-a POST /v1/responses '{"input":"Say hello to the reader.","max_output_tokens":8,"temperature":0}')
[[ $r1 == 200* ]] || fail "response: $r1"
rid=$(sed -n 's/.*"id":"\(resp_[0-9a-f]*\)".*/\1/p' <<<"$r1")
[[ $rid == resp_* ]] || fail "no response id: $r1"
stop

start
got=$(req key-a GET /v1/sessions/novel-1)
[[ $got == 200* ]] || fail "the session after the restart: $got"
[ "$(field blocks_disk "$got")" = "$blocks" ] || fail "its blocks are not on disk: $got"
other=$(req key-b GET /v1/sessions/novel-1)
[[ $other == 404* ]] || fail "the other tenant sees the session: $other"
second=$(req key-a POST /v1/chat/completions "$chat")
[[ $second == 200* ]] || fail "the turn after the restart: $second"
[ "$(field content "$first")" = "$(field content "$second")" ] || fail "the text changed: $first vs $second"
cached=$(field cached_tokens "$second")
[ "${cached:-0}" -ge 16 ] || fail "the session's prompt was not served from disk: $second"
stored=$(req key-a GET "/v1/responses/$rid")
[[ $stored == 200* ]] || fail "the stored response after the restart: $stored"
other=$(req key-b GET "/v1/responses/$rid")
[[ $other == 404* ]] || fail "the other tenant reads the response: $other"
next=$(req key-a POST /v1/responses "{\"previous_response_id\":\"$rid\",\"input\":\"And goodbye.\",\"max_output_tokens\":8,\"temperature\":0}")
[[ $next == 200* ]] || fail "continuing the stored response: $next"
deleted=$(req key-a DELETE /v1/sessions/novel-1)
[[ $deleted == 200* ]] || fail "delete: $deleted"
gone=$(req key-a GET /v1/sessions/novel-1)
[[ $gone == 404* ]] || fail "the deleted session is still there: $gone"
metrics=$(curl -sf -H "Authorization: Bearer key-a" "$base/metrics") || fail "metrics"
grep -Eq '^inferx:stored_responses(\{[^}]*\})? [1-9]' <<<"$metrics" || fail "stored_responses gauge"
stop
echo "cli_sessions: ok (cached $cached tokens of the session after the restart)"
