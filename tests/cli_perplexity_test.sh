#!/bin/sh
# `inferx perplexity` end to end on the bundled model.
# Default mode (the repository's README.md as text, -c 64, 4 chunks): --help,
# the --json fields and their agreement with the text output, a chunk run in
# steps smaller than itself (-b < -c) giving the same figure, the KL
# divergence of the model against itself (~0, the same top token everywhere)
# through a base file of the documented size, and bad input failing with a
# message and exit status 1 (runtime) or 2 (usage).
# --reference: the model's perplexity on ../shared/models/heldout.txt at
# -c 256 within 0.5% of llama.cpp's (../shared/quant/reference.json; the
# bundled model is the F16 copy of target-f32.gguf, whose figure that is),
# with the same chunk count; exits 77 ("skipped") when ../shared is absent.
# usage: cli_perplexity_test.sh INFERX JSON_GET SOURCE_DIR SHARED_DIR TMP_DIR [--reference]
set -u
bin=$1 jget=$2 src=$3 shared=$4 mode=${6:-}
tmp=$5/cli_perplexity${mode#--} # each mode its own folder: ctest -j runs the two at once
mkdir -p "$tmp" || exit 1
model=$src/models/target-f16.gguf
out=

errf="$tmp/cli_ppl_err"
. "$(dirname "$0")/cli_lib.sh"

# get FILE STEP...: one value of a JSON file (see json_get.c)
get() {
    "$jget" "$@" 2>"$errf" || { out=$(cat "$errf"); fail "json_get $*"; }
}
# check AWK_CONDITION MESSAGE
check() {
    awk "BEGIN { exit !($1) }" || fail "$2"
}
# run_ok OUTFILE ARGS...: inferx perplexity ARGS > OUTFILE succeeds
run_ok() {
    o=$1
    shift
    "$bin" perplexity "$@" >"$o" 2>"$errf" || { out=$(cat "$errf"); fail "inferx perplexity $* exited $?"; }
}

if [ "$mode" = "--reference" ]; then
    ref=$shared/quant/reference.json text=$shared/models/heldout.txt
    if [ ! -f "$ref" ] || [ ! -f "$text" ]; then
        echo "SKIP: $ref or $text is absent"
        exit 77
    fi
    entry=file=../shared/models/target-f32.gguf
    want=$(get "$ref" files "$entry" perplexity ppl)
    want_chunks=$(get "$ref" files "$entry" perplexity n_chunks)
    run_ok "$tmp/cli_ppl_ref.json" -m "$model" -f "$text" -c 256 --json
    got=$(get "$tmp/cli_ppl_ref.json" ppl)
    chunks=$(get "$tmp/cli_ppl_ref.json" chunks)
    [ "$chunks" = "$want_chunks" ] || fail "$chunks chunks; llama.cpp had $want_chunks"
    check "$got / $want < 1.005 && $want / $got < 1.005" "PPL $got is not within 0.5% of llama.cpp's $want"
    # on text like its own, the model against itself: PPL(base) from the file too
    base=$tmp/cli_ppl_ref_base.bin
    run_ok "$tmp/cli_ppl_ref.json" -m "$model" -f "$text" -c 256 --chunks 4 --kl-divergence-base "$base"
    run_ok "$tmp/cli_ppl_ref.json" -m "$model" -f "$text" --kl-divergence-base "$base" --kl-divergence --json
    kld=$(get "$tmp/cli_ppl_ref.json" kld mean) ratio=$(get "$tmp/cli_ppl_ref.json" ln_ppl_ratio)
    check "$kld < 1e-4 && $kld > -1e-4" "self KL divergence $kld is not ~0"
    check "$ratio < 1e-4 && $ratio > -1e-4" "ln(PPL/PPL(base)) $ratio is not ~0"
    [ "$(get "$tmp/cli_ppl_ref.json" same_top)" = 1 ] || fail "not the same top token everywhere"
    rm -f "$tmp/cli_ppl_ref.json" "$base" "$errf"
    echo "ok: PPL $got (llama.cpp $want), $chunks chunks; self KL divergence $kld"
    exit 0
fi

text=$src/README.md
out=$("$bin" perplexity --help) || fail "--help exited $?"
expect "usage: inferx perplexity"
expect "--kl-divergence-base FILE"

# --json, saving the base distributions on the way
base=$tmp/cli_ppl_base.bin
run_ok "$tmp/cli_ppl.json" -m "$model" -f "$text" -c 64 --chunks 4 --json --kl-divergence-base "$base"
j=$tmp/cli_ppl.json
for k in model file n_ctx n_batch n_seq chunks tokens tokens_scored threads seconds ppl ppl_pm ln_ppl ln_ppl_pm chunk_ppl; do
    get "$j" "$k" >/dev/null
done
[ "$(get "$j" n_ctx)" = 64 ] || fail "n_ctx is not 64"
[ "$(get "$j" chunks)" = 4 ] || fail "chunks is not 4"
[ "$(get "$j" tokens_scored)" = 124 ] || fail "tokens_scored is not 4 x 31"
ppl=$(get "$j" ppl) ln=$(get "$j" ln_ppl) pm=$(get "$j" ppl_pm)
check "$ppl > 1 && $pm > 0" "PPL $ppl +/- $pm"
check "exp($ln) / $ppl > 0.999999 && exp($ln) / $ppl < 1.000001" "ln_ppl $ln is not log(PPL $ppl)"
[ "$(get "$j" chunk_ppl 3)" = "$ppl" ] || fail "the last running estimate is not the final PPL"
# the file: 20-byte head, 4 x 64 token ids, 124 records of 2 floats + 4096 16-bit steps
size=$(wc -c <"$base")
[ "$size" -eq $((20 + 4 * 64 * 4 + 124 * (8 + 4096 * 2))) ] || fail "base file of $size bytes"

# the text output says the same, and so does a run in 40-token steps on one thread
final=$(awk "BEGIN { printf \"Final estimate: PPL = %.4f\", $ppl }")
out=$("$bin" perplexity -m "$model" -f "$text" -c 64 --chunks 4 2>/dev/null) || fail "text run exited $?"
expect "[1]"
expect "[4]$(awk "BEGIN { printf \"%.4f\", $ppl }"),"
expect "$final"
line=$(printf '%s\n' "$out" | grep "^Final")
out=$("$bin" perplexity -m "$model" -f "$text" -c 64 --chunks 4 -b 40 -t 1 2>/dev/null) || fail "-b 40 exited $?"
expect "$line"

# the model against itself
run_ok "$tmp/cli_ppl_kl.json" -m "$model" --kl-divergence-base "$base" --kl-divergence --json
k=$tmp/cli_ppl_kl.json
[ "$(get "$k" chunks)" = 4 ] || fail "KL run: chunks is not 4"
[ "$(get "$k" tokens_scored)" = 124 ] || fail "KL run: tokens_scored is not 124"
kld=$(get "$k" kld mean) top=$(get "$k" same_top) ratio=$(get "$k" ln_ppl_ratio) kppl=$(get "$k" ppl)
get "$k" kld p99 >/dev/null
get "$k" p_diff rms >/dev/null
check "$kld < 1e-4 && $kld > -1e-4" "self KL divergence $kld is not ~0"
[ "$top" = 1 ] || fail "same top token in $top of the positions, not all"
# PPL(base) comes from the stored records, where log-probabilities more than
# 16 below the top are clipped (as in llama.cpp): on text this far from the
# model's (README.md) that lowers it, never raises it
check "$ratio > -1e-4" "ln(PPL/PPL(base)) $ratio is negative"
check "$kppl / $ppl < 1.0001 && $ppl / $kppl < 1.0001" "KL run's PPL $kppl differs from $ppl"
out=$("$bin" perplexity -m "$model" --kl-divergence-base "$base" --kl-divergence -f "$text" 2>/dev/null) ||
    fail "text KL run exited $?"
expect "Mean    KLD:"
expect "Same top p: 100.000 ± 0.000 %"

# bad input
printf 'It is a truth universally acknowledged.\n' >"$tmp/cli_ppl_short.txt"
head -c 5000 "$base" >"$tmp/cli_ppl_trunc.bin"
expect_exit 2 perplexity -m "$model"
expect "-f TEXT is required"
expect_exit 2 perplexity -m "$model" -f "$text" -c 4
expect "--ctx-size expects an integer in [8, 1048576]"
expect_exit 2 perplexity -m "$model" -f "$text" -c abc
expect_exit 2 perplexity -m "$model" -f "$text" --bogus
expect_exit 2 perplexity -m "$model" -f
expect_exit 2 perplexity -m "$model" --kl-divergence
expect "--kl-divergence-base"
expect_exit 1 perplexity -m "$model" -f "$text" -c 1024
expect "context of 512"
expect_exit 1 perplexity -m "$model" -f "$tmp/cli_ppl_missing.txt"
expect "cannot open"
expect_exit 1 perplexity -m "$tmp/cli_ppl_missing.gguf" -f "$text"
expect "cannot open"
expect_exit 1 perplexity -m "$model" -f "$tmp/cli_ppl_short.txt" -c 64
expect "two chunks"
expect_exit 1 perplexity -m "$model" --kl-divergence-base "$text" --kl-divergence
expect "not a --kl-divergence-base file"
expect_exit 1 perplexity -m "$model" --kl-divergence-base "$tmp/cli_ppl_trunc.bin" --kl-divergence
expect "should be"
expect_exit 1 perplexity -m "$model" --kl-divergence-base "$base" --kl-divergence -c 128
expect "64-token chunks"
expect_exit 1 perplexity -m "$model" --kl-divergence-base "$base" --kl-divergence -f "$src/docs/kv-cache.md"
expect "does not tokenize"
rm -f "$base" "$j" "$k" "$tmp/cli_ppl_short.txt" "$tmp/cli_ppl_trunc.bin" "$errf"
echo ok
