#!/usr/bin/env bash
# Tensor parallelism against one process on the same cores (docs/distributed.md):
# 2 ranks x 1 thread (`mpirun -np 2 inferx ... --tp 2 -t 1`) against 1 process x
# 2 threads, alternated REPS times, medians printed with their ratio:
#   decode   `inferx run -n 128 --ignore-eos --temp 0`: generated tokens/s, and the
#            ranks' exchange time per step from the --tp report
#   batched  `inferx bench --throughput` (16 prompts x 64 in + 64 out): output tok/s
# then the all-gather latency and bandwidth for a step's message sizes
# (tp_comm_bench). The load average is printed before and after: on a shared
# machine the figures are only comparable within one run.
#   bench/tp_bench.sh [BUILD_DIR] [REPS] [MODEL]
set -euo pipefail
# shellcheck source=bench/dist_lib.sh
. "$(dirname "$0")/dist_lib.sh" "$@" # build, reps, bin, model, prompt, tmp

exch_per_step() { sed -n 's/.*exchanges in [0-9.]* ms (\([0-9.]*\) us a step).*/\1/p' "$1"; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
: >"$tmp/d1"; : >"$tmp/d2"; : >"$tmp/x2"; : >"$tmp/b1"; : >"$tmp/b2"
bargs=(bench --throughput -m "$model" --num-prompts 16 --max-concurrency 16 --input-len 64 --output-len 64 --no-sequential)
for r in $(seq 1 "$reps"); do
    "$bin" run -m "$model" -p "$prompt" -n 128 --ignore-eos --temp 0 -t 2 >/dev/null 2>"$tmp/e1"
    mpi 2 "$bin" run --tp 2 -m "$model" -p "$prompt" -n 128 --ignore-eos --temp 0 -t 1 >/dev/null 2>"$tmp/e2"
    decode_rate "$tmp/e1" >>"$tmp/d1"
    decode_rate "$tmp/e2" >>"$tmp/d2"
    exch_per_step "$tmp/e2" >>"$tmp/x2"
    "$bin" "${bargs[@]}" -t 2 >"$tmp/o1" 2>/dev/null
    mpi 2 "$bin" "${bargs[@]}" --tp 2 -t 1 >"$tmp/o2" 2>/dev/null
    batched_rate "$tmp/o1" >>"$tmp/b1"
    batched_rate "$tmp/o2" >>"$tmp/b2"
    echo "rep $r: decode $(tail -n1 "$tmp/d1") vs tp $(tail -n1 "$tmp/d2") tok/s (exchanges $(tail -n1 "$tmp/x2") us/step);" \
         "batched $(tail -n1 "$tmp/b1") vs tp $(tail -n1 "$tmp/b2") out tok/s"
done
d1=$(median <"$tmp/d1") d2=$(median <"$tmp/d2") x2=$(median <"$tmp/x2") b1=$(median <"$tmp/b1") b2=$(median <"$tmp/b2")
awk -v d1="$d1" -v d2="$d2" -v x2="$x2" -v b1="$b1" -v b2="$b2" -v n="$reps" 'BEGIN {
    printf "decode  (median of %d): 1 process x 2 threads %.1f tok/s, 2 ranks x 1 thread %.1f tok/s: %.1f%%\n", n, d1, d2, (d1 > 0 ? 100 * d2 / d1 : 0)
    printf "        exchanges %.0f us a step = %.1f%% of the tp step (%.0f us)\n", x2, (d2 > 0 ? x2 / (1e4 / d2) : 0), (d2 > 0 ? 1e6 / d2 : 0)
    printf "batched (median of %d): 1 process x 2 threads %.1f out tok/s, 2 ranks x 1 thread %.1f: %.1f%%\n", n, b1, b2, (b1 > 0 ? 100 * b2 / b1 : 0) }'
if [ -x "$build/bin/tp_comm_bench" ]; then
    mpi 2 "$build/bin/tp_comm_bench" 2
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
