#!/bin/sh
# `inferx bench --serve` end to end: a real `inferx serve` of the bundled
# model on a free loopback port (with an API key), the benchmark's --json
# figures and table, and its errors: a missing or wrong key, nothing
# listening, a bad URL, bad flags. No timing is asserted, only that requests
# completed and the figures are positive.
# usage: cli_bench_serve_test.sh INFERX TMP_DIR
set -u
bin=$1 tmp=$2
log=$tmp/cli_bench_serve_$$.log
json=$tmp/cli_bench_serve_$$.json
err=$tmp/cli_bench_serve_$$.err
key=sk-bench-serve-test
out=
pid=

cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -f "$log" "$json" "$err"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

errf=$err
. "$(dirname "$0")/cli_lib.sh"
# cli_lib.sh's fail, plus the server's log
fail() {
    echo "FAIL: $*" >&2
    printf '%s\n' "$out" >&2
    [ -f "$log" ] && { echo "-- server log:" >&2; cat "$log" >&2; }
    exit 1
}
# json_values KEY: every value of "KEY" in the --json output, one a line
# (jansson's indented output puts each key on a line of its own).
json_values() {
    sed -n "s/^ *\"$1\": \([^,]*\),*\$/\1/p" "$json"
}
# check_all KEY AWK_TEST: every level's value of KEY passes the test ($1).
check_all() {
    vals=$(json_values "$1")
    [ -n "$vals" ] || fail "--json lacks \"$1\""
    printf '%s\n' "$vals" | awk "{ if (!($2)) bad = 1 } END { exit bad }" ||
        fail "\"$1\" is not $2 in every level: $(echo $vals)"
}

# Port 0: the kernel picks a free port, which the server prints. The server
# keeps its KV cache in q8_0 (--kv-cache-dtype), which the startup line and
# /metrics report.
"$bin" serve --port 0 -t 1 --api-key "$key" --kv-cache-dtype q8_0 2>"$log" &
pid=$!
port=
i=0
while [ $i -lt 300 ] && [ -z "$port" ]; do
    port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log")
    kill -0 "$pid" 2>/dev/null || break
    [ -z "$port" ] && sleep 0.1
    i=$((i + 1))
done
[ -n "$port" ] || fail "inferx serve did not start"
url=http://127.0.0.1:$port
# The port is printed once the server listens; /ready says it serves.
if command -v curl >/dev/null 2>&1; then
    i=0
    until curl -sf "$url/ready" >/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || fail "GET /ready never answered 200"
        sleep 0.1
    done
    m=$(curl -sf -H "Authorization: Bearer $key" "$url/metrics") || fail "GET /metrics failed"
    case $m in *'cache_dtype="q8_0"'*) ;; *) fail "/metrics lacks cache_dtype=\"q8_0\"" ;; esac
fi
grep -q "KV pool .* of q8_0: " "$log" || { out=$(cat "$log"); fail "the startup line lacks the KV type"; }

"$bin" bench --serve "$url" --api-key "$key" --concurrency 1,4 --num-prompts 4 --max-tokens 8 --json \
    >"$json" 2>"$err" || { out=$(cat "$err" "$json"); fail "bench --serve --json exited $?"; }
out=$(cat "$json")
[ "$(json_values concurrency | tr '\n' ' ')" = "1 4 " ] || fail "levels are not 1 and 4"
check_all completed '$1 == 4'
check_all failed '$1 == 0'
check_all output_tokens '$1 == 32'
check_all output_tokens_per_s '$1 > 0'
check_all request_throughput '$1 > 0'
check_all ttft_ms_p50 '$1 > 0'
check_all ttft_ms_p99 '$1 > 0'
# chunks that reach the client in one read (a loaded machine) have gaps of 0
check_all itl_ms_p50 '$1 >= 0'
check_all itl_ms_mean '$1 >= 0'
check_all e2e_ms_p50 '$1 > 0'
check_all output_tokens_per_s_vs_c1 '$1 > 0'

# The table, with the key from the environment and the /v1 form of the URL.
out=$(INFERX_API_KEY=$key "$bin" bench --serve "$url/v1/" --concurrency 1,2 --num-prompts 2 --max-tokens 2 \
    --prompt-words 5 --seed 7 2>&1) || fail "bench --serve exited $?"
expect "| concurrency | ok | failed |"
expect "| 1 | 2 | 0 |"
expect "| 2 | 2 | 0 |"
expect "output tok/s against concurrency 1 in this run"

expect_exit 1 bench --serve "$url" --concurrency 1 --num-prompts 1 --max-tokens 1
expect "--api-key"
expect_exit 1 bench --serve "$url" --api-key wrong --concurrency 1 --num-prompts 1 --max-tokens 1
expect "401"
expect_exit 1 bench --serve "$url" --api-key "$key" --model nope --concurrency 1 --max-tokens 1
expect "--model"
expect_exit 1 bench --serve "$url" --api-key "$key" --concurrency 1 --max-tokens 100000
expect "context"

kill -TERM "$pid"
wait "$pid"
src=$?
pid=
[ $src -eq 0 ] || fail "inferx serve exited $src after SIGTERM"
# Nothing listens on the port now.
expect_exit 1 bench --serve "$url" --concurrency 1 --max-tokens 1
expect "cannot reach"

out=$("$bin" bench --serve --help) || fail "--serve --help exited $?"
expect "usage: inferx bench --serve URL"
out=$("$bin" bench --help) || fail "bench --help exited $?"
expect "bench --serve URL"
expect_exit 2 bench --serve
expect_exit 2 bench --serve 127.0.0.1:8000
expect "http://"
expect_exit 2 bench --serve ftp://127.0.0.1/
expect_exit 2 bench --serve "$url" --concurrency 0
expect_exit 2 bench --serve "$url" --concurrency 1,,4
expect_exit 2 bench --serve "$url" --concurrency x
expect_exit 2 bench --serve "$url" --max-tokens 0
expect_exit 2 bench --serve "$url" --prompt-words 0
expect_exit 2 bench --serve "$url" --bogus 1
echo ok
