#!/bin/sh
# `inferx bench` end to end on the bundled model: --json parses and holds
# every figure, the table names both tests, bad input fails with a message.
# usage: cli_bench_test.sh INFERX BENCH_JSON_CHECK SOURCE_DIR TMP_DIR
set -u
bin=$1 check=$2 src=$3 tmp=$4
model=$src/models/target-f16.gguf
out=

errf="$tmp/cli_bench_err"
. "$(dirname "$0")/cli_lib.sh"

# A 64 MiB bandwidth buffer keeps the test quick under sanitizers.
"$bin" bench -m "$model" -p 16 -n 4 -r 1 --json --bw-mib 64 >"$tmp/cli_bench.json" 2>"$tmp/cli_bench_err" ||
    { out=$(cat "$tmp/cli_bench_err"); fail "bench --json exited $?"; }
out=$("$check" "$tmp/cli_bench.json" n_prompt=16 n_gen=4 reps=1 2>&1) || fail "bench --json: $(cat "$tmp/cli_bench.json")"

out=$("$bin" bench -m "$model" -p 8 -n 2 -r 2 -t 1 --bw-mib 16 2>&1) || fail "bench exited $?"
expect " pp8 |"
expect " tg2 |"
expect "memory read bandwidth:"
expect "decode bound:"
out=$("$bin" bench -m "$model" -p 0 -n 2 -r 1 --json --bw-mib 16 2>&1) || fail "bench -p 0 exited $?"
expect '"prefill_tokens_per_s": null'
# The default -p 512 shrinks to the bundled model's context of 512 less the generated token.
out=$("$bin" bench -m "$model" -n 2 -r 1 --bw-mib 16 2>&1) || fail "bench with the default -p exited $?"
expect " pp511 |"
# --throughput: the concurrent run, pure prefill in the same run, the engine profile.
out=$("$bin" bench --throughput -m "$model" --num-prompts 4 --max-concurrency 4 --input-len 16 --output-len 4 \
    --no-sequential 2>&1) || fail "bench --throughput exited $?"
expect "pure prefill (same prompts, 1 token out): "
expect "% of it"
expect "concurrent run, "
expect "(matmuls "
out=$("$bin" bench --throughput -m "$model" --num-prompts 2 --max-concurrency 2 --input-len 8 --output-len 2 \
    --no-sequential --json 2>/dev/null) || fail "bench --throughput --json exited $?"
expect '"total_vs_prefill":'
expect '"profile":{"wall_s":'
# KV types compared in the same KV memory (4 sequences of 32 tokens in f16):
# q8_0 and q4_0 hold more blocks and whole sequences.
out=$("$bin" bench --throughput -m "$model" --num-prompts 4 --max-concurrency 4 --input-len 8 --output-len 24 \
    --kv-cache-dtype f16,q8_0,q4_0 --kv-cache-mem 294912 2>&1) || fail "bench --throughput KV list exited $?"
expect "KV memory 294912 bytes for each type"
expect "f16              8          4"
expect "q8_0            14          7"
expect "q4_0            27         13"
out=$("$bin" bench --throughput -m "$model" --num-prompts 2 --max-concurrency 2 --input-len 8 --output-len 2 \
    --kv-cache-dtype f16,q8_0 --kv-cache-mem 294912 --json 2>/dev/null) || fail "KV list --json exited $?"
expect '"kv_cache_dtype":"q8_0","blocks":14,"sequences_fit":14'
expect_exit 2 bench --throughput -m "$model" --kv-cache-dtype f16,q8_0
expect "give --kv-cache-mem"
expect_exit 2 bench --throughput -m "$model" --kv-cache-dtype f16,q7
expect "got 'q7'"
out=$("$bin" bench -m "$model" -p 8 -n 2 -r 1 -t 1 --bw-mib 16 --kv-cache-dtype q8_0 2>&1) || fail "bench q8_0 exited $?"
expect "KV cache q8_0"
expect_exit 2 bench -m "$model" --kv-cache-dtype f17
# --spec: speculation against off in one run, outputs compared token for token.
out=$("$bin" bench --spec -m "$model" -n 8 -r 1 -t 1 2>&1) || fail "bench --spec exited $?"
expect "ngram k 4 (fixed)"
expect "outputs identical: yes"
expect "speedup: "
out=$("$bin" bench --spec --draft-model "$src/models/draft-f32.gguf" -m "$model" --prompts echo -n 6 -r 1 -t 1 \
    2>&1) || fail "bench --spec draft exited $?"
expect "echo prompts, batch 1, 6 new tokens, draft k 4"
expect "outputs identical: yes"
expect "cost ratio c = "
expect "ideal (1-a^(k+1))/((1-a)(1+k c))"
expect_exit 2 bench --spec ngram -m "$model" --prompts poems
expect "repeat, prose or echo"
expect_exit 1 bench --spec draft -m "$model" --draft-model "$tmp/cli_bench_missing.gguf"
expect "draft model"
out=$("$bin" bench --spec --help) || fail "bench --spec --help exited $?"
expect "usage: inferx bench --spec"
expect "--draft-kv-mem"
out=$("$bin" bench --help) || fail "--help exited $?"
expect "usage: inferx bench"

expect_exit 2 bench -m "$model" -r 0
expect_exit 2 bench -m "$model" -p abc
expect_exit 2 bench -m "$model" -p 0 -n 0
expect_exit 2 bench -m "$model" -t
expect_exit 2 bench -m "$model" --bogus
expect_exit 1 bench -m "$tmp/cli_bench_missing.gguf"
expect "cannot open"
expect_exit 1 bench -m "$model" -p 4096 -n 4
expect "context"
expect_exit 1 bench -m "$model" -p 512 -n 4
expect "context"
rm -f "$tmp/cli_bench.json" "$tmp/cli_bench_err"
echo ok
