#!/bin/sh
# Serving comparison of inferx builds or settings, alternated so that a noisy
# (shared) machine hits every configuration alike.
#
# usage: serve_compare.sh MODEL ROUNDS LEVELS CONFIG...
#   MODEL   GGUF file every server loads
#   ROUNDS  how many times each configuration runs (round-robin over CONFIGs)
#   LEVELS  C:N[,C:N...]: concurrency C with N requests (e.g. 1:4,16:32,64:64);
#           none: only the start (time to ready, memory)
#   CONFIG  "label=/path/to/inferx [serve options...]"; the first is the baseline.
#           A binary named llama-server is llama.cpp's server, run as
#           `llama-server -m MODEL --host --port [options...]` and ready when
#           its /health answers 200 (it answers 503 while loading).
# environment: CLIENT (the inferx binary that runs `bench --serve`; default: the
#   first config's), PROMPT_WORDS (64), MAX_TOKENS (64), PORT (18200).
#
# Each run starts `inferx serve`, takes the time from launch to /ready and the
# resident set then (VmRSS), runs one
# `inferx bench --serve` per level, takes the resident set after them (VmRSS)
# and the peak (VmHWM, loading included), and stops the server. Every figure line
# carries the 1-minute load average at its start. The summary gives each
# configuration's medians over the rounds and its ratio to the baseline's.
set -eu
[ $# -ge 4 ] || { sed -n 2,16p "$0" >&2; exit 2; }
model=$1 rounds=$2 levels=$3
shift 3
words=${PROMPT_WORDS:-64} max_tokens=${MAX_TOKENS:-64} port=${PORT:-18200}
first_bin=${1#*=}
first_bin=${first_bin%% *}
client=${CLIENT:-$first_bin}
tmp=$(mktemp -d /tmp/serve_compare.XXXXXX)
rows=$tmp/rows
trap 'rm -rf "$tmp"' EXIT
: >"$rows"

load1() { cut -d' ' -f1 /proc/loadavg; }
kb() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$2/status"; }

run_one() { # label bin args...
    label=$1 bin=$2
    shift 2
    port=$((port + 1))
    t0=$(date +%s.%N)
    ready_path=/ready
    if [ "$(basename "$bin")" = llama-server ]; then
        ready_path=/health
        "$bin" -m "$model" --host 127.0.0.1 --port "$port" "$@" >/dev/null 2>"$tmp/serve.log" &
    else
        "$bin" serve -m "$model" --host 127.0.0.1 --port "$port" --access-log off "$@" >/dev/null 2>"$tmp/serve.log" &
    fi
    pid=$!
    trap 'kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
    ready=
    i=0
    while [ $i -lt 3000 ]; do
        if curl -sf "http://127.0.0.1:$port$ready_path" >/dev/null 2>&1; then
            ready=$(echo "$(date +%s.%N) - $t0" | bc)
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
        i=$((i + 1))
    done
    if [ -z "$ready" ]; then
        echo "serve_compare: $label did not become ready:" >&2
        cat "$tmp/serve.log" >&2
        kill "$pid" 2>/dev/null || true
        exit 1
    fi
    rss_ready=$(kb VmRSS "$pid")
    for lv in $(echo "$levels" | tr ',' ' ' | sed 's/^none$//'); do
        c=${lv%%:*} n=${lv#*:}
        l=$(load1)
        "$client" bench --serve "http://127.0.0.1:$port" --concurrency "$c" --num-prompts "$n" \
            --prompt-words "$words" --max-tokens "$max_tokens" --json >"$tmp/b.json"
        jq -r --arg lab "$label" --arg load "$l" --arg c "$c" '.levels[0] |
            [$lab, $c, $load, .output_tokens_per_s, .ttft_ms_p50, .itl_ms_p50, .itl_ms_p99] | @tsv' \
            "$tmp/b.json" >>"$rows"
        tail -n 1 "$rows"
    done
    rss_end=$(kb VmRSS "$pid")
    hwm=$(kb VmHWM "$pid")
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    trap 'rm -rf "$tmp"' EXIT
    printf 'mem\t%s\t%s\t%s\t%s\t%s\n' "$label" "$ready" "$rss_ready" "$rss_end" "$hwm" >>"$rows"
    printf '%s: ready after %s s, RSS at ready %s MiB, after serving %s MiB, peak %s MiB (load %s)\n' "$label" \
        "$ready" $((rss_ready / 1024)) $((rss_end / 1024)) $((hwm / 1024)) "$(load1)"
}

echo "model $model, $rounds rounds, levels $levels, $words-word prompts, $max_tokens tokens out"
echo "label	C	load1	out_tok/s	ttft_p50_ms	itl_p50_ms	itl_p99_ms"
r=0
while [ $r -lt "$rounds" ]; do
    for cfg in "$@"; do
        label=${cfg%%=*}
        # shellcheck disable=SC2086
        run_one "$label" ${cfg#*=}
    done
    r=$((r + 1))
done

# Medians over the rounds; ratios to the first configuration.
echo
echo "medians over $rounds rounds (ratio to ${1%%=*}):"
awk -F'\t' '
function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
$1 == "mem" { if (!($2 in seen_m)) { order_m[++nm] = $2; seen_m[$2] = 1 }
              ready[$2] = ready[$2] " " $3; rss[$2] = rss[$2] " " $4; end[$2] = end[$2] " " $5
              hwm[$2] = hwm[$2] " " $6; next }
{ k = $1 SUBSEP $2
  if (!($1 in seen_l)) { order_l[++nl] = $1; seen_l[$1] = 1 }
  if (!($2 in seen_c)) { order_c[++nc] = $2; seen_c[$2] = 1 }
  tok[k] = tok[k] " " $4; ttft[k] = ttft[k] " " $5; p50[k] = p50[k] " " $6; p99[k] = p99[k] " " $7; ld[k] = ld[k] " " $3 }
END {
    printf "%-12s %4s %10s %7s %10s %7s %9s %9s %7s %9s\n", "label", "C", "out_tok/s", "ratio", "ttft_p50", "ratio",
           "itl_p50", "itl_p99", "p99/p50", "load1"
    for (ci = 1; ci <= nc; ci++) {
        c = order_c[ci]; b = order_l[1] SUBSEP c
        bt = median(tok[b]); bf = median(ttft[b])
        for (li = 1; li <= nl; li++) {
            k = order_l[li] SUBSEP c
            if (!(k in tok)) continue
            t = median(tok[k]); f = median(ttft[k]); q50 = median(p50[k]); q99 = median(p99[k])
            printf "%-12s %4s %10.1f %7.3f %10.1f %7.3f %9.1f %9.1f %7.2f %9s\n", order_l[li], c, t,
                   (bt > 0 ? t / bt : 0), f, (bf > 0 ? f / bf : 0), q50, q99, (q50 > 0 ? q99 / q50 : 0), median(ld[k])
        }
    }
    printf "\n%-12s %10s %14s %14s %14s\n", "label", "ready_s", "rss_ready_MiB", "rss_served_MiB", "rss_peak_MiB"
    for (li = 1; li <= nm; li++) {
        l = order_m[li]
        printf "%-12s %10.2f %14.0f %14.0f %14.0f\n", l, median(ready[l]), median(rss[l]) / 1024, median(end[l]) / 1024,
               median(hwm[l]) / 1024
    }
}' "$rows"
