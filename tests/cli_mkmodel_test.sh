#!/bin/sh
# `inferx mkmodel` end to end: a tiny model in every weight type loads in
# `inferx info` and generates with `inferx run`; the same seed gives the same
# file; architecture options (qwen2, sliding window, llama3 RoPE, tied
# embeddings), a synthesized and a copied vocabulary; and bad input fails
# with a message and leaves no file behind.
# usage: cli_mkmodel_test.sh INFERX SOURCE_DIR TMP_DIR
set -u
bin=$1 src=$2 tmp=$3/cli_mkmodel
out=
rm -rf "$tmp"
mkdir -p "$tmp" || exit 1

errf="$tmp/err"
. "$(dirname "$0")/cli_lib.sh"
# Nothing but the files named here is left in $tmp.
expect_only() {
    left=$(cd "$tmp" && ls -A | grep -v -x -e err "$@")
    [ -z "$left" ] || fail "files left behind: $left"
}
mk() {
    "$bin" mkmodel "$@" 2>"$tmp/err" || { out=$(cat "$tmp/err"); fail "inferx mkmodel $* exited $?"; }
}
run() {
    out=$("$bin" run -m "$1" -p "Once upon a time" -n 8 --temp 0 2>&1) || fail "inferx run -m $1 exited $?"
    expect "generated"
}

set -- f32 "ALL_F32 (0)" f16 "MOSTLY_F16 (1)" bf16 "MOSTLY_BF16 (32)" q8_0 "MOSTLY_Q8_0 (7)" q4_0 "MOSTLY_Q4_0 (2)"
while [ $# -gt 0 ]; do
    t=$1 ft=$2
    shift 2
    m=$tmp/tiny-$t.gguf
    mk -o "$m" --shape tiny --type "$t"
    out=$("$bin" info "$m") || fail "inferx info $m exited $?"
    expect "name:          random-tiny-$t-seed1"
    expect "file type:     $ft"
    expect "layers:        2"
    expect "kv heads:      2"
    expect "vocab size:    4,096"
    run "$m"
done

# Same seed, same bytes; another seed, other weights.
mk -o "$tmp/again.gguf" --shape tiny --type q4_0
cmp -s "$tmp/tiny-q4_0.gguf" "$tmp/again.gguf" || fail "the same seed wrote different files"
mk -o "$tmp/seed2.gguf" --shape tiny --type q4_0 --seed 2
cmp -s "$tmp/tiny-q4_0.gguf" "$tmp/seed2.gguf" && fail "seeds 1 and 2 wrote the same file"

mk -o "$tmp/qwen2.gguf" --shape tiny --arch qwen2 --sliding-window 16 --rope-scaling llama3 \
    --rope-factor 8 --rope-orig-ctx 64 --tied --layers 3 --ff 96 --ctx 128
out=$("$bin" info "$tmp/qwen2.gguf") || fail "info qwen2"
expect "architecture:  qwen2"
expect "layers:        3"
expect "ffn:           96"
expect "blk.2.attn_q.bias"
printf '%s\n' "$out" | grep -q " output\.weight " && fail "--tied wrote output.weight"
run "$tmp/qwen2.gguf"

# Every architecture of the table: written from the table, loaded, run.
for a in llama mistral qwen2 qwen3 phi3 gemma gemma2 gpt2 starcoder2 stablelm falcon; do
    mk -o "$tmp/arch-$a.gguf" --shape tiny --arch $a --type q8_0
    out=$("$bin" info "$tmp/arch-$a.gguf") || fail "info $a"
    expect "architecture:  $a"
    run "$tmp/arch-$a.gguf"
done
mk -o "$tmp/phi3-long.gguf" --shape tiny --arch phi3 --rope-scaling longrope --rope-orig-ctx 64
out=$("$bin" info "$tmp/phi3-long.gguf") || fail "info phi3 longrope"
expect "rope_factors_long.weight"
run "$tmp/phi3-long.gguf"
# The other weight types (K-quant rows are blocks of 256).
for t in q4_1 q5_0 q5_1 iq4_nl; do
    mk -o "$tmp/t-$t.gguf" --shape tiny --type $t
    run "$tmp/t-$t.gguf"
done
for t in q2_k q3_k q4_k q5_k q6_k iq4_xs; do
    mk -o "$tmp/t-$t.gguf" --shape tiny --type $t --embd 256 --ff 512
    run "$tmp/t-$t.gguf"
done
expect_exit 2 mkmodel -o "$tmp/bad-k.gguf" --shape tiny --type q4_k
expect "multiples of 256"
mk -o "$tmp/yarn.gguf" --shape tiny --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 64
run "$tmp/yarn.gguf"

mk -o "$tmp/synth.gguf" --shape tiny --vocab-size 300 --heads 8 --kv-heads 8
out=$("$bin" info "$tmp/synth.gguf") || fail "info synth"
expect "vocab size:    300"
expect "kv heads:      8"
run "$tmp/synth.gguf"

spm=$src/../shared/vocab/ggml-vocab-llama-spm.gguf
if [ -f "$spm" ]; then
    mk -o "$tmp/spm.gguf" --shape tiny --type q8_0 --vocab "$spm"
    out=$("$bin" info "$tmp/spm.gguf") || fail "info spm"
    expect "vocab size:    32,000"
    run "$tmp/spm.gguf"
fi

out=$("$bin" mkmodel --help) || fail "--help exited $?"
expect "usage: inferx mkmodel"

# Bad input: usage errors (2), runtime errors (1), never a file left behind.
rm -f "$tmp"/*.gguf
printf keep >"$tmp/keep.gguf"
o=$tmp/bad.gguf
expect_exit 2 mkmodel --shape tiny
expect_exit 2 mkmodel -o "$o" --shape huge
expect_exit 2 mkmodel -o "$o" --type q7_0
expect_exit 2 mkmodel -o "$o" --layers abc
expect_exit 2 mkmodel -o "$o" --layers 0
expect_exit 2 mkmodel -o "$o" --layers -3
expect_exit 2 mkmodel -o "$o" --embd
expect_exit 2 mkmodel -o "$o" --shape tiny --embd 48 --heads 4 --type q8_0
expect "multiples of 32"
expect_exit 2 mkmodel -o "$o" --shape tiny --heads 3
expect_exit 2 mkmodel -o "$o" --shape tiny --kv-heads 3
expect_exit 2 mkmodel -o "$o" --shape tiny --rope-factor 2
expect_exit 2 mkmodel -o "$o" --shape tiny --rope-base -1
expect_exit 2 mkmodel -o "$o" --shape tiny --rope-base nan
expect_exit 2 mkmodel -o "$o" --shape tiny --rope-scaling bogus
expect_exit 2 mkmodel -o "$o" --shape tiny --arch gpt5
expect "supported: llama"
expect_exit 1 mkmodel -o "$o" --shape tiny --arch phi3 --tied
expect "output.weight"
expect_exit 2 mkmodel -o "$o" --shape tiny --vocab-size 100
expect_exit 2 mkmodel -o "$o" --shape tiny --vocab-size 300 --vocab "$src/models/target-f16.gguf"
expect_exit 2 mkmodel -o "$o" --bogus
expect_exit 1 mkmodel -o "$o" --shape tiny --vocab "$tmp/missing.gguf"
expect "cannot open"
expect_exit 1 mkmodel -o "$o" --shape tiny --vocab "$tmp/keep.gguf"
expect_exit 1 mkmodel -o "$tmp/no/such/dir/m.gguf" --shape tiny
expect "no/such/dir"
# A failure keeps an existing output as it was.
expect_exit 1 mkmodel -o "$tmp/keep.gguf" --shape tiny --vocab "$tmp/missing.gguf"
[ "$(cat "$tmp/keep.gguf")" = keep ] || fail "a failed mkmodel changed the existing output"
# An output that is a directory: the write fails and cleans up.
mkdir "$tmp/dir.gguf"
expect_exit 1 mkmodel -o "$tmp/dir.gguf" --shape tiny
expect_only -e keep.gguf -e dir.gguf
rm -rf "$tmp"
echo ok
