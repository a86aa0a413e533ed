#!/bin/sh
# `inferx quantize` (and `inferx imatrix`) end to end on the bundled model.
# Default mode: --help; the bundled F16 model quantized to plain types and to
# mixes, each file reloaded by `inferx info` (general.file_type and every
# tensor's type checked against the mix's rules) and run by `inferx
# perplexity` (a short text: Q8_0 within 0.5% of F16's perplexity, the 4-bit
# mixes within 10%); --pure and --override (glob and regex); an imatrix
# collected and used (rtn and gptq); bad input failing with a message and
# exit status 1 (runtime) or 2 (usage), leaving no output file.
# --reference: ../shared/models/target-f32.gguf quantized to Q4_K_M and Q4_0
# gets the same type for every tensor as llama.cpp's files in ../shared/quant
# and the same file size; exits 77 ("skipped") when ../shared is absent.
# usage: cli_quantize_test.sh INFERX JSON_GET SOURCE_DIR SHARED_DIR TMP_DIR [--reference]
set -u
bin=$1 jget=$2 src=$3 shared=$4 mode=${6:-}
tmp=$5/cli_quantize${mode#--} # each mode its own folder: ctest -j runs the two at once
model=$src/models/target-f16.gguf
out=
rm -rf "$tmp"
mkdir -p "$tmp" || exit 1
errf="$tmp/err"
. "$(dirname "$0")/cli_lib.sh"

# types FILE: "name type" per tensor, from `inferx info`
types() {
    "$bin" info "$1" >"$tmp/info" 2>"$errf" || { out=$(cat "$errf"); fail "inferx info $1"; }
    awk '/^tensors:/ { t = 1; next } t && $1 == "total" { exit } t && $1 ~ /^[0-9]+$/ { print $2, $3 }' "$tmp/info"
}
# type_of FILE NAME
type_of() {
    types "$1" | awk -v n="$2" '$1 == n { print $2 }'
}
# quant ARGS...: inferx quantize ARGS succeeds (progress kept in $tmp/progress)
quant() {
    "$bin" quantize "$@" 2>"$tmp/progress" || { out=$(cat "$tmp/progress"); fail "inferx quantize $* exited $?"; }
}
check() {
    awk "BEGIN { exit !($1) }" || fail "$2"
}
ppl() {
    "$bin" perplexity -m "$1" -f "$src/README.md" -c 64 --chunks 3 -t 2 --json >"$tmp/ppl.json" 2>"$errf" ||
        { out=$(cat "$errf"); fail "inferx perplexity -m $1"; }
    "$jget" "$tmp/ppl.json" ppl
}

if [ "$mode" = "--reference" ]; then
    f32=$shared/models/target-f32.gguf
    if [ ! -f "$f32" ] || [ ! -f "$shared/quant/tgt-q4_k_m.gguf" ]; then
        echo "SKIP: $f32 or $shared/quant is absent"
        exit 77
    fi
    for pair in Q4_K_M:tgt-q4_k_m Q4_0:tgt-q4_0; do
        t=${pair%%:*} ref=$shared/quant/${pair#*:}.gguf
        quant "$f32" "$tmp/ours.gguf" "$t"
        # (llama.cpp writes the tensors sorted by layer, then name; we keep the input's order)
        types "$tmp/ours.gguf" | sort >"$tmp/ours.types"
        types "$ref" | sort >"$tmp/ref.types"
        out=$(diff "$tmp/ref.types" "$tmp/ours.types") || fail "$t: tensor types differ from llama.cpp's (< theirs, > ours)"
        [ "$(wc -c <"$tmp/ours.gguf")" -eq "$(wc -c <"$ref")" ] || fail "$t: file size differs from llama.cpp's"
        echo "ok: $t: $(wc -l <"$tmp/ours.types") tensor types and the file size as llama.cpp's"
    done
    rm -rf "$tmp"
    exit 0
fi

out=$("$bin" quantize --help) || fail "--help exited $?"
expect "Q4_K_M"
expect "--override PAT=TYPE"
expect "--imatrix FILE"

base=$(ppl "$model")

# Plain types: every matmul weight in the type (rows of 288 / 768 here:
# 256-element types fall back as llama.cpp's do), norms stay F32.
for spec in Q8_0:Q8_0:Q8_0:7 Q4_0:Q4_0:Q4_0:2 Q5_1:Q5_1:Q5_1:9 IQ4_NL:IQ4_NL:IQ4_NL:25; do
    t=${spec%%:*} rest=${spec#*:}
    q=${rest%%:*} rest=${rest#*:}
    m=$tmp/$t.gguf
    quant "$model" "$m" "$t" -t 2
    [ "$(type_of "$m" blk.1.attn_q.weight)" = "$q" ] || fail "$t: attn_q is not $q"
    [ "$(type_of "$m" blk.1.attn_norm.weight)" = F32 ] || fail "$t: a norm was quantized"
    out=$("$bin" info "$m") && expect "(${rest#*:})"
done
out=$(cat "$tmp/progress")
expect "[  57/  57] output.weight"
q8=$(ppl "$tmp/Q8_0.gguf")
check "$q8 / $base < 1.005 && $base / $q8 < 1.005" "Q8_0 perplexity $q8 is not within 0.5% of F16's $base"

# Mixes: the output head in Q8_0 (288-wide rows do not fit Q6_K), attn_v and
# ffn_down with more bits on llama.cpp's layers (2 and 5 of 6 here).
quant "$model" "$tmp/q4km.gguf" Q4_K_M
types "$tmp/q4km.gguf" >"$tmp/q4km.types"
want="output.weight Q8_0
token_embd.weight Q5_0
blk.0.attn_v.weight Q5_0
blk.5.attn_v.weight Q8_0
blk.2.attn_v.weight Q8_0
blk.0.ffn_down.weight Q4_K
blk.2.ffn_down.weight Q6_K
blk.5.ffn_down.weight Q6_K
blk.4.ffn_gate.weight Q5_0"
echo "$want" | while read -r n t; do
    grep -q -x "$n $t" "$tmp/q4km.types" || { out=$(cat "$tmp/q4km.types"); fail "Q4_K_M: $n is not $t"; }
done || exit 1
out=$(cat "$tmp/progress")
expect "(fallback from Q4_K)"
p=$(ppl "$tmp/q4km.gguf")
check "$p / $base < 1.10" "Q4_K_M perplexity $p is not within 10% of F16's $base"

quant "$model" "$tmp/q3km.gguf" Q3_K_M
[ "$(type_of "$tmp/q3km.gguf" blk.0.attn_v.weight)" = Q5_1 ] || fail "Q3_K_M: attn_v of layer 0 is not Q5_K's fallback Q5_1"
[ "$(type_of "$tmp/q3km.gguf" blk.3.attn_output.weight)" = Q5_0 ] || fail "Q3_K_M: attn_output is not Q4_K's fallback Q5_0"
[ "$(type_of "$tmp/q3km.gguf" blk.3.ffn_gate.weight)" = IQ4_NL ] || fail "Q3_K_M: ffn_gate is not Q3_K's fallback IQ4_NL"
[ "$(type_of "$tmp/q3km.gguf" blk.3.ffn_down.weight)" = Q4_K ] || fail "Q3_K_M: ffn_down is not Q4_K"

# --pure: no per-tensor choices (ffn_down stays Q4_K, the head Q4_K's fallback)
quant "$model" "$tmp/pure.gguf" Q4_K_M --pure
[ "$(type_of "$tmp/pure.gguf" blk.2.ffn_down.weight)" = Q4_K ] || fail "--pure: ffn_down of layer 2 is not Q4_K"
[ "$(type_of "$tmp/pure.gguf" output.weight)" = Q5_0 ] || fail "--pure: the output head is not Q5_0"

# --override: first match wins; glob over the whole name, regex anywhere
quant "$model" "$tmp/ovr.gguf" Q4_0 --override 'blk.[0-1].*=Q8_0' --override 're:ffn_(up|gate)=Q5_0' \
    --override 'output.weight=F16'
[ "$(type_of "$tmp/ovr.gguf" blk.1.ffn_up.weight)" = Q8_0 ] || fail "override: the first match did not win"
[ "$(type_of "$tmp/ovr.gguf" blk.3.ffn_gate.weight)" = Q5_0 ] || fail "override: the regex did not apply"
[ "$(type_of "$tmp/ovr.gguf" blk.3.ffn_down.weight)" = Q4_0 ] || fail "override: a tensor no pattern matches changed"
[ "$(type_of "$tmp/ovr.gguf" output.weight)" = F16 ] || fail "override: the output head is not F16"
quant "$model" "$tmp/ovr2.gguf" Q4_0 --override 'nothing*=Q8_0'
out=$(cat "$tmp/progress")
expect "matches no tensor"

# Calibration: an imatrix (llama.cpp's layout: 43 entries for 6 layers x 7
# matmuls + the head) with X^T X beside it; --imatrix and --method gptq use it.
text=$src/README.md
"$bin" imatrix -m "$model" -f "$text" -o "$tmp/im.dat" -c 64 --chunks 4 --xtx -t 2 2>"$errf" ||
    { out=$(cat "$errf"); fail "inferx imatrix exited $?"; }
out=$(cat "$errf")
expect "[4/4] chunks, 43 weights observed"
[ -s "$tmp/im.dat.xtx" ] || fail "imatrix --xtx wrote no $tmp/im.dat.xtx"
quant "$model" "$tmp/imq.gguf" Q4_0 --imatrix "$tmp/im.dat"
out=$(cat "$tmp/progress")
expect "43 entries from 4 chunks"
expect "token_embd.weight"
expect "(no imatrix entry)"
pi=$(ppl "$tmp/imq.gguf")
check "$pi / $base < 1.10" "Q4_0 --imatrix perplexity $pi is not within 10% of F16's $base"
quant "$model" "$tmp/gptq.gguf" Q4_0 --imatrix "$tmp/im.dat" --method gptq
out=$(cat "$tmp/progress")
expect "(gptq)"
pg=$(ppl "$tmp/gptq.gguf")
check "$pg / $base < 1.10" "Q4_0 --method gptq perplexity $pg is not within 10% of F16's $base"
cmp -s "$tmp/imq.gguf" "$tmp/gptq.gguf" && fail "--method gptq wrote the same file as rtn"
[ "$(type_of "$tmp/gptq.gguf" blk.0.ffn_down.weight)" = Q4_0 ] || fail "gptq: ffn_down is not Q4_0"
# A truncated or corrupt imatrix is an error, at any length.
size=$(wc -c <"$tmp/im.dat")
for n in 0 3 4 9 100 $((size / 2)) $((size - 1)); do
    head -c "$n" "$tmp/im.dat" >"$tmp/im_bad.dat"
    expect_exit 1 quantize "$model" "$tmp/bad.gguf" Q4_0 --imatrix "$tmp/im_bad.dat"
    expect "im_bad.dat"
done
head -c "$size" "$tmp/im.dat" >"$tmp/im_bad.dat" && printf '\001\000' >>"$tmp/im_bad.dat"
expect_exit 1 quantize "$model" "$tmp/bad.gguf" Q4_0 --imatrix "$tmp/im_bad.dat"
expect "2 unexpected bytes after the trailer"
expect_exit 1 quantize "$model" "$tmp/bad.gguf" Q4_0 --imatrix "$tmp/im.dat.xtx"
expect "im.dat.xtx"
cp "$tmp/im.dat" "$tmp/noxtx.dat"
expect_exit 1 quantize "$model" "$tmp/bad.gguf" Q4_0 --imatrix "$tmp/noxtx.dat" --method gptq
expect "needs the X^T X statistics"
expect_exit 2 imatrix -m "$model" -o "$tmp/x.dat"
expect "-f TEXT is required"
expect_exit 1 imatrix -m "$model" -f "$tmp/nothing.txt" -o "$tmp/x.dat"
expect "nothing.txt"
expect_exit 2 imatrix -m "$model" -f "$text" -c 4
expect "--ctx-size expects an integer in [8, 1048576]"

# Bad input: a message, exit 2 (usage) or 1 (runtime), and no output file.
o=$tmp/bad.gguf
expect_exit 2 quantize "$model" "$o" Q9_Z
expect "unknown TYPE 'Q9_Z'"
expect_exit 2 quantize "$model" "$o"
expect "expected IN.gguf OUT.gguf TYPE"
expect_exit 2 quantize "$model" "$o" Q4_0 --override 're:ffn_(=Q8_0'
expect "bad regular expression"
expect_exit 2 quantize "$model" "$o" Q4_0 --override 'blk.*=Q7_0'
expect "unknown type 'Q7_0'"
expect_exit 2 quantize "$model" "$o" Q4_0 --override 'blk.*'
expect "expected PATTERN=TYPE"
expect_exit 2 quantize "$model" "$o" Q4_0 --method awq
expect "--method must be rtn or gptq"
expect_exit 2 quantize "$model" "$o" Q4_0 --method gptq
expect "needs --imatrix"
expect_exit 1 quantize "$tmp/none.gguf" "$o" Q4_0
expect "none.gguf"
head -c 100000 "$model" >"$tmp/trunc.gguf"
expect_exit 1 quantize "$tmp/trunc.gguf" "$o" Q4_0
expect "outside data section"
expect_exit 1 quantize "$tmp/Q4_0.gguf" "$o" Q8_0
expect "--allow-requantize"
[ -e "$o" ] && fail "a failed run left $o behind"
quant "$tmp/Q8_0.gguf" "$o" Q4_0 --allow-requantize
[ "$(type_of "$o" blk.2.attn_k.weight)" = Q4_0 ] || fail "--allow-requantize did not requantize"

echo "ok: plain types, mixes, --pure, --override, calibration, bad input; PPL F16 $base, Q8_0 $q8," \
    "Q4_K_M $p, Q4_0 --imatrix $pi, --method gptq $pg"
rm -rf "$tmp"
