#!/bin/sh
# `inferx info` end to end. Default mode: the bundled model (always present),
# option errors and broken files. --vocab: every ../shared/vocab file (exits 77,
# "skipped", when that directory is absent).
# usage: cli_info_test.sh INFERX SOURCE_DIR SHARED_DIR TMP_DIR [--vocab]
set -u
bin=$1 src=$2 shared=$3 mode=${5:-}
tmp=$4/cli_info${mode#--} # each mode its own folder: ctest -j runs the two at once
mkdir -p "$tmp" || exit 1
out=

errf="$tmp/cli_info_err"
. "$(dirname "$0")/cli_lib.sh"

if [ "$mode" = "--vocab" ]; then
    if [ ! -d "$shared/vocab" ]; then
        echo "SKIP: $shared/vocab is absent"
        exit 77
    fi
    n=0
    for f in "$shared"/vocab/*.gguf; do
        out=$("$bin" info "$f") || fail "inferx info $f exited $?"
        expect "tensors:       none (vocab-only file)"
        expect "vocab size:"
        expect "tokenizer:     "
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] || fail "no .gguf files in $shared/vocab"
    out=$("$bin" info "$shared/vocab/ggml-vocab-phi-3.gguf") || fail "phi-3"
    expect "chat template: jinja from the GGUF (269 bytes, like phi3, tool calls generic-json"
    out=$("$bin" info "$shared/vocab/ggml-vocab-falcon.gguf" --ctx 4096 --batch 8) || fail "falcon"
    expect "kv heads:      1"
    expect "head dim:      64 (embedding / heads)"
    expect "f16        8,192 (8.19 kB)         268,435,456 (268 MB)"
    echo "ok: $n vocab files"
    exit 0
fi

model=$src/models/target-f16.gguf
out=$("$bin" info "$model") || fail "inferx info exited $?"
expect "GGUF v3, 15,448,448 bytes (15.4 MB), alignment 32, data at offset 98,048"
expect "contents:      24 metadata keys, 57 tensors"
expect "architecture:  llama"
expect "name:          austen-llama-target-7.7M"
expect "chat template: built-in plain (the model has no tokenizer.chat_template)"
expect "parameters:    7,671,456 (7.67 M)"
expect "file type:     MOSTLY_F16 (1)"
expect "context:       512"
expect "layers:        6"
expect "kv heads:      2"
expect "head dim:      48"
expect "vocab size:    4,096"
expect "tokenizer:     llama (pre: -)"
expect "blk.5.ffn_down.weight"
expect "[288, 4096]"
expect "f32        4,608 (4.61 kB)         2,359,296 (2.36 MB)"
expect "f16        2,304 (2.30 kB)"
# q8_0: 6 x 2 x 2 rows of 48 values, each a block of 32 (34 bytes) + one of 16 (18)
expect "q8_0       1,248 (1.25 kB)"
expect "q4_0       672 B"
out=$("$bin" info "$model" --ctx 1024 --batch 4) || fail "--ctx/--batch exited $?"
expect "ctx 1,024 x batch 4"
expect "f16        2,304 (2.30 kB)         9,437,184 (9.44 MB)"
out=$("$bin" info "$model" --load 2>/dev/null) || fail "--load exited $?"
expect "loaded (--load, as inferx serve does) in "
expect "KV pool 268 MB of f16: "
# the pool's pages become resident as blocks are first written: little of it at start
expect " blocks of 16 tokens (resident "
expect "), process resident "
case $out in *"tokens (resident 268 MB)"*) fail "the KV pool is resident before any request: $out" ;; esac
out=$("$bin" info --help) || fail "--help exited $?"
expect "usage: inferx info"

expect_exit 2 info --ctx abc "$model"
expect_exit 2 info --ctx 0 "$model"
expect_exit 2 info --batch
expect_exit 2 info --bogus "$model"
expect_exit 2 info "$model" "$model"
expect_exit 1 info "$tmp/cli_info_missing.gguf"
expect "cannot open"
dd if="$model" of="$tmp/cli_info_trunc.gguf" bs=1000 count=60 2>/dev/null || fail "dd"
expect_exit 1 info "$tmp/cli_info_trunc.gguf"
expect "'tokenizer.ggml.tokens': array of 4096 strings: string"
expect "runs past end of file (offset"
dd if="$model" of="$tmp/cli_info_trunc.gguf" bs=1000 count=1 2>/dev/null || fail "dd"
expect_exit 1 info "$tmp/cli_info_trunc.gguf"
expect "truncated or corrupt file"
rm -f "$tmp/cli_info_trunc.gguf" "$tmp/cli_info_err"
echo ok
