#!/bin/sh
# Do files written by `inferx quantize` load and run in llama.cpp, with the same
# perplexity? (docs/quantization.md "Our files in llama.cpp".) For each type:
# target-f32.gguf quantized by inferx, then the perplexity of the whole held-out
# text at -c 256 by `inferx perplexity` and by llama.cpp's `llama-perplexity` (same
# chunking and scoring: the second half of each 256-token chunk), and their
# relative difference. The F32 file itself is the baseline, run by both in the
# same run. llama.cpp is not built here: pass the build directory of an existing
# build that has bin/llama-perplexity (e.g. cmake -DLLAMA_CURL=OFF, target
# llama-perplexity); without one the script says so and exits 0.
#
# usage: bench/llama_cpp_compat.sh INFERX LLAMA_BUILD_DIR SHARED_DIR TMP_DIR [THREADS] [TYPES...]
#   default types: Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0 IQ4_XS
#   CHUNKS=N in the environment scores only the first N chunks of 256 tokens (both
#   engines; default: the whole text, 76 chunks)
set -eu
# shellcheck disable=SC2086 # $ch: empty or two words
bin=$1 lbuild=$2 shared=$3 tmp=$4 t=${5:-2}
shift 4
[ $# -gt 0 ] && shift
types=${*:-"Q4_K_M Q5_K_M Q6_K Q8_0 Q4_0 IQ4_XS"}
lppl=$lbuild/bin/llama-perplexity
if [ ! -x "$lppl" ]; then
    echo "llama_cpp_compat: no $lppl (build llama.cpp's llama-perplexity target first); skipped"
    exit 0
fi
f32=$shared/models/target-f32.gguf text=$shared/models/heldout.txt
ch=${CHUNKS:+--chunks $CHUNKS}
mkdir -p "$tmp"

ours() { # PPL of $1 by inferx
    "$bin" perplexity -m "$1" -f "$text" -c 256 $ch -t "$t" --json 2>/dev/null |
        python3 -c "import json,sys; d=json.load(sys.stdin); print('%.4f %.4f' % (d['ppl'], d['ppl_pm']))"
}
theirs() { # PPL of $1 by llama.cpp ("Final estimate: PPL = X +/- Y"), or "failed"
    if "$lppl" -m "$1" -f "$text" -c 256 -b 256 $ch -t "$t" >"$2" 2>&1; then
        sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2/p' "$2" | tail -1
    else
        echo failed
    fi
}
row() { # row LABEL FILE
    o=$(ours "$2")
    l=$(theirs "$2" "$tmp/llama-$1.log")
    python3 -c "import sys
o, l = sys.argv[2].split(), sys.argv[3].split()
if len(l) < 2: print('| %s | %s ± %s | did not load or run (see the log) | — |' % (sys.argv[1], o[0], o[1])); sys.exit()
print('| %s | %s ± %s | %s ± %s | %+.4f%% |' % (sys.argv[1], o[0], o[1], l[0], l[1], 100 * (float(l[0]) / float(o[0]) - 1)))" \
        "$1" "$o" "$l"
}
echo "| file | inferx PPL | llama.cpp PPL | llama.cpp / inferx - 1 |"
echo "|---|---|---|---|"
row "F32 (baseline, not quantized)" "$f32"
for ty in $types; do
    "$bin" quantize "$f32" "$tmp/compat-$ty.gguf" "$ty" -t "$t" >/dev/null 2>&1
    row "$ty (written by inferx quantize)" "$tmp/compat-$ty.gguf"
done
echo
echo "llama.cpp: $("$lbuild/bin/llama-perplexity" --version 2>&1 | grep -m1 -i 'version' || echo unknown); -c 256 -b 256 ${CHUNKS:+--chunks $CHUNKS }-t $t"
