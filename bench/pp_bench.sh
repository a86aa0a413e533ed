#!/usr/bin/env bash
# Pipeline parallelism against one process on the same cores (docs/distributed.md):
# 2 stages x 1 thread (`mpirun -np 2 inferx ... --pp 2 -t 1`) against 1 process x
# 2 threads (and, for reference, 1 process x 1 thread: one step at a time, a
# 2-stage pipeline keeps about one core busy), alternated REPS times, medians
# printed with their ratio:
#   decode   `inferx run -n 128 --ignore-eos --temp 0` (one token a step: one
#            micro-batch, the stages take turns): generated tokens/s
#   batched  `inferx bench --throughput` (16 prompts x 64 in + 64 out) with 1, 2
#            (the default: one per stage) and 4 micro-batches a step: output tok/s
# and, from the ranks' --pp reports, the activation bytes a step, stage 1's
# share of its step time spent waiting (the bubble, transfers included) and
# rank 0's wait a step; then one hop's latency and bandwidth for a step's
# message sizes (tp_comm_bench pp). The load average is printed before and after: on a
# shared machine the figures are only comparable within one run.
#   bench/pp_bench.sh [BUILD_DIR] [REPS] [MODEL]
set -euo pipefail
# shellcheck source=bench/dist_lib.sh
. "$(dirname "$0")/dist_lib.sh" "$@" # build, reps, bin, model, prompt, tmp

# from the --pp reports of rank R in FILE: idle %, wait us a step, MB / steps
idle_pct() { sed -n "s/.*rank $1: pipeline.*idle in steps: \([0-9.]*\)%.*/\1/p" "$2"; }
wait_us() { sed -n "s/.*rank $1: pipeline.*waits [0-9.]* ms (\([0-9.]*\) us a step).*/\1/p" "$2"; }
kb_step() { sed -n "s/.*rank $1: pipeline stage [0-9]* of [0-9]*: \([0-9]*\) steps, [0-9]* messages, \([0-9.]*\) MB.*/\2 \1/p" "$2" |
    awk '$2 > 0 {printf "%.2f\n", 1000 * $1 / $2}'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
series=(d0 d1 d2 di dw dk b0 b1 bi bw bk)
for m in 1 2 4; do series+=("p$m"); done
for s in "${series[@]}"; do : >"$tmp/$s"; done
bargs=(bench --throughput -m "$model" --num-prompts 16 --max-concurrency 16 --input-len 64 --output-len 64 --no-sequential)
for r in $(seq 1 "$reps"); do
    "$bin" run -m "$model" -p "$prompt" -n 128 --ignore-eos --temp 0 -t 1 >/dev/null 2>"$tmp/e0"
    "$bin" run -m "$model" -p "$prompt" -n 128 --ignore-eos --temp 0 -t 2 >/dev/null 2>"$tmp/e1"
    decode_rate "$tmp/e0" >>"$tmp/d0"
    mpi 2 "$bin" run --pp 2 -m "$model" -p "$prompt" -n 128 --ignore-eos --temp 0 -t 1 >/dev/null 2>"$tmp/e2"
    decode_rate "$tmp/e1" >>"$tmp/d1"
    decode_rate "$tmp/e2" >>"$tmp/d2"
    idle_pct 1 "$tmp/e2" >>"$tmp/di"
    wait_us 0 "$tmp/e2" >>"$tmp/dw"
    kb_step 0 "$tmp/e2" >>"$tmp/dk"
    "$bin" "${bargs[@]}" -t 1 >"$tmp/o0" 2>/dev/null
    "$bin" "${bargs[@]}" -t 2 >"$tmp/o1" 2>/dev/null
    batched_rate "$tmp/o0" >>"$tmp/b0"
    batched_rate "$tmp/o1" >>"$tmp/b1"
    line="rep $r: decode $(tail -n1 "$tmp/d1") (1 thread $(tail -n1 "$tmp/d0")) vs pp $(tail -n1 "$tmp/d2") tok/s;"
    line="$line batched $(tail -n1 "$tmp/b1") (1 thread $(tail -n1 "$tmp/b0")) vs pp"
    for m in 1 2 4; do
        mpi 2 "$bin" "${bargs[@]}" --pp 2 --micro-batches "$m" -t 1 >"$tmp/o2" 2>"$tmp/e3"
        batched_rate "$tmp/o2" >>"$tmp/p$m"
        if [ "$m" = 2 ]; then
            idle_pct 1 "$tmp/e3" >>"$tmp/bi"
            wait_us 0 "$tmp/o2" >>"$tmp/bw"
            kb_step 0 "$tmp/o2" >>"$tmp/bk"
        fi
        line="$line $(tail -n1 "$tmp/p$m") (M=$m)"
    done
    echo "$line out tok/s"
done
declare -A med
for s in "${series[@]}"; do med[$s]=$(median <"$tmp/$s"); done
awk -v d0="${med[d0]}" -v b0="${med[b0]}" -v d1="${med[d1]}" -v d2="${med[d2]}" -v di="${med[di]}" -v dw="${med[dw]}" -v dk="${med[dk]}" \
    -v b1="${med[b1]}" -v p1="${med[p1]}" -v p2="${med[p2]}" -v p4="${med[p4]}" -v bi="${med[bi]}" \
    -v bw="${med[bw]}" -v bk="${med[bk]}" -v n="$reps" 'BEGIN {
    printf "decode  (median of %d): 1 process x 2 threads %.1f tok/s, 2 stages x 1 thread %.1f tok/s: %.1f%%\n", n, d1, d2, (d1 > 0 ? 100 * d2 / d1 : 0)
    printf "        1 process x 1 thread %.1f tok/s: 2 stages x 1 thread = %.1f%% of it\n", d0, (d0 > 0 ? 100 * d2 / d0 : 0)
    printf "        stage 1 idle %.1f%% of its steps; rank 0 waits %.0f us a step of %.0f; %.2f kB a step between ranks\n", di, dw, (d2 > 0 ? 1e6 / d2 : 0), dk
    printf "batched (median of %d): 1 process x 2 threads %.1f out tok/s; 2 stages x 1 thread: %.1f (%.1f%%) with 1 micro-batch, %.1f (%.1f%%) with 2, %.1f (%.1f%%) with 4\n", n, b1, p1, (b1 > 0 ? 100 * p1 / b1 : 0), p2, (b1 > 0 ? 100 * p2 / b1 : 0), p4, (b1 > 0 ? 100 * p4 / b1 : 0)
    printf "        1 process x 1 thread %.1f out tok/s: 2 stages with 2 micro-batches = %.1f%% of it\n", b0, (b0 > 0 ? 100 * p2 / b0 : 0)
    printf "        with 2 micro-batches: stage 1 idle %.1f%% of its steps; rank 0 waits %.0f us a step; %.2f kB a step between ranks\n", bi, bw, bk }'
if [ -x "$build/bin/tp_comm_bench" ]; then
    mpi 2 "$build/bin/tp_comm_bench" 2 200 pp
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
