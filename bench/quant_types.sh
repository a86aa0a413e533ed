#!/bin/sh
# Prefill and decode speed of every weight type, in one run (docs/performance.md
# "Speed by weight type"): for each type a TinyLlama-shaped model (random weights:
# `inferx mkmodel` writes the F16 one, `inferx quantize` the others from it, --pure
# for a plain type name, llama.cpp's per-tensor choices for the _K_S/_M/_L mixes), then
# ROUNDS rounds in which every type runs `inferx bench -r 1` once, types in turn
# (so a slow minute of the shared machine hits every type alike). Per type: the
# medians over the rounds of prefill tokens/s, decode tokens/s, the fraction of
# the bandwidth bound `inferx bench` measured beside that decode, the weight bytes
# per second that decode read (the bound's bandwidth times that fraction: on a VM
# whose bandwidth moves from minute to minute it is the steadier figure), that
# bandwidth, and prefill as a fraction of Q4_0's prefill in the same round (Q4_0 is
# the baseline, measured in every round).
#
# usage: bench/quant_types.sh INFERX TMP_DIR [ROUNDS] [PROMPT] [GEN] [TYPES...]
#   defaults: 3 rounds, -p 64, -n 32, all types; threads: all cores. ROUNDS=0 makes the
#   models only.
#   Types slower than ~2 tokens/s of prefill (no vector kernel) make a round take
#   minutes: give a shorter PROMPT and GEN, or a list of TYPES.
#   BASE=OTHER_INFERX in the environment: each round also runs OTHER_INFERX on
#   every type right after INFERX (a same-run baseline), and the table adds the
#   new / base ratios (medians of the per-round ratios).
#   LLAMA_BENCH=PATH in the environment: each round also runs llama.cpp's llama-bench
#   (-t as THREADS, default 2) on every type's file right after INFERX (a same-run
#   peer); its "decode / bound" divides by the bound INFERX measured just before.
#   LAYERS=N (and VOCAB_SIZE=N) in the environment: the TinyLlama shape cut to N
#   layers (and a synthetic vocabulary of N tokens instead of the llama SPM one):
#   the same matmul shapes, a model made in minutes instead of the 18 a K-quant
#   of all 1.1 B parameters takes here. A cut model's decode step reads so few
#   bytes that part of them stays in the caches between steps, which flatters
#   "decode / bound" (on the Zen 5 test host 4 layers read 0.78-0.96 of the bound
#   where the 22 of the full shape read 0.69-0.89: docs/performance.md); leave
#   LAYERS unset for the figure of a real model.
set -eu
bin=$1 tmp=$2 rounds=${3:-3} np=${4:-64} ng=${5:-32}
shift 2
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
types=${*:-"Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K IQ4_NL IQ4_XS F16"}
vocab=$(dirname "$0")/../../shared/vocab/ggml-vocab-llama-spm.gguf
[ -f "$vocab" ] || vocab=/work/shared/vocab/ggml-vocab-llama-spm.gguf
mkdir -p "$tmp"
case " $types " in *" Q4_0 "*) ;; *) types="Q4_0 $types" ;; esac

model() { # the model file of type $1, made once: F16 by mkmodel, the others quantized from it
    [ "$1" = F16 ] || model F16
    f=$tmp/qt-$1.gguf
    [ -s "$f" ] && return 0
    case $1 in
    F16) "$bin" mkmodel --shape tinyllama --type f16 ${LAYERS:+--layers "$LAYERS"} \
        $(if [ -n "${VOCAB_SIZE:-}" ]; then echo "--vocab-size $VOCAB_SIZE"; else echo "--vocab $vocab"; fi) \
        -o "$f.part" >/dev/null 2>&1 ;;
    *_K_[SML]) "$bin" quantize "$tmp/qt-F16.gguf" "$f.part" "$1" >/dev/null 2>&1 ;;
    *) "$bin" quantize "$tmp/qt-F16.gguf" "$f.part" "$1" --pure >/dev/null 2>&1 ;;
    esac
    mv "$f.part" "$f"
}
for ty in $types; do model "$ty"; done

# with BASE=another inferx binary, every round runs it too, right after this one
bins="new=$bin${BASE:+ base=$BASE}"
out=$tmp/qt-results.txt
: >"$out"
r=1
while [ "$r" -le "$rounds" ]; do
    for ty in $types; do
        for lb in $bins; do
            "${lb#*=}" bench -m "$tmp/qt-$ty.gguf" -p "$np" -n "$ng" -r 1 --json >"$tmp/qt-run.json" 2>/dev/null
            python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
bw=d['mem_bandwidth_gbs']; print(sys.argv[2], sys.argv[3], sys.argv[4], d['prefill_tokens_per_s'], d['decode_tokens_per_s'], d['decode_fraction_of_bound'], d['kernels'], bw * d['decode_fraction_of_bound'], bw)" \
                "$tmp/qt-run.json" "$r" "$ty" "${lb%%=*}" >>"$out"
        done
        if [ -n "${LLAMA_BENCH:-}" ]; then
            "$LLAMA_BENCH" -m "$tmp/qt-$ty.gguf" -p "$np" -n "$ng" -r 1 -t "${THREADS:-2}" -o json >"$tmp/qt-run.json" 2>/dev/null
            # the bound: the one INFERX measured just before (its decode over its fraction)
            python3 -c "import json,sys; d=json.load(open(sys.argv[1])); pp=[t['avg_ts'] for t in d if t['n_gen']==0][0]; tg=[t['avg_ts'] for t in d if t['n_prompt']==0][0]
nb=[l.split() for l in open(sys.argv[4]) if l.split()[:3]==[sys.argv[2], sys.argv[3], 'new']][-1]; bound=float(nb[4])/float(nb[5])
print(sys.argv[2], sys.argv[3], 'llama.cpp', pp, tg, tg/bound, 'llama-bench', float(nb[8]) * tg / bound, nb[8])" \
                "$tmp/qt-run.json" "$r" "$ty" "$out" >>"$out"
        fi
    done
    r=$((r + 1))
done
# ROUNDS=0 only makes the models
[ "$rounds" -gt 0 ] || { echo "models in $tmp: $(for ty in $types; do printf 'qt-%s.gguf ' "$ty"; done)"; exit 0; }

python3 - "$out" "$np" "$ng" "$rounds" <<'EOF2'
import os, statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
np_, ng, rounds = sys.argv[2], sys.argv[3], sys.argv[4]
base = {(r[0], r[2]): float(r[3]) for r in rows if r[1] == 'Q4_0'}
types, bins = [], []
for r in rows:
    if r[1] not in types: types.append(r[1])
    if r[2] not in bins: bins.append(r[2])
med = lambda rs, f: st.median(f(r) for r in rs)
print('| type | binary | prefill pp%s (tok/s) | decode tg%s (tok/s) | decode / bound | decode reads (GB/s) | bandwidth (GB/s) | prefill / Q4_0 prefill |' % (np_, ng))
print('|---|---|---:|---:|---:|---:|---:|---:|')
for t in types:
    for b in bins:
        rs = [r for r in rows if r[1] == t and r[2] == b]
        print('| %s | %s | %.2f | %.2f | %.0f%% | %.1f | %.1f | %.2f |' % (t, b, med(rs, lambda r: float(r[3])), med(rs, lambda r: float(r[4])),
              100 * med(rs, lambda r: float(r[5])), med(rs, lambda r: float(r[7])), med(rs, lambda r: float(r[8])),
              med(rs, lambda r: float(r[3]) / base[(r[0], r[2])])))
    rs = {(r[0], r[2]): r for r in rows if r[1] == t}
    rr = [r for r in rows if r[1] == t and r[2] == 'new']
    for b in bins[1:]:
        print('| %s | new / %s | %.2fx | %.2fx | | | | |' % (t, b, med(rr, lambda r: float(r[3]) / float(rs[(r[0], b)][3])),
              med(rr, lambda r: float(r[4]) / float(rs[(r[0], b)][4]))))
print()
print('kernels %s; medians of %s rounds, each type run by each binary in turn in every round; ratios within a round;'
      ' load average at the end: %s' % (rows[0][6], rounds, ' '.join('%.2f' % x for x in os.getloadavg())))
EOF2
