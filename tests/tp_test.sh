#!/usr/bin/env bash
# Tensor and pipeline parallelism end to end (docs/distributed.md):
# `mpirun -np N inferx run --tp N` (part run) and `--pp N`, `--tp 2 --pp 2`
# (part pp) must print the same greedy completion as one process, on the
# bundled model (tp: 2 and 3 ranks, 3 splits a KV head's query heads over two
# ranks; pp: 2 and 3 stages, micro-batches, TP x PP on 4 ranks) and on the
# ../shared/arch models of every architecture (generated as tests/test_arch.c
# does; skipped without ../shared or numpy). Part pp also serves a batch of
# concurrent requests with chunked prefill and preemption under --pp 2 and
# --tp 2 --pp 2 and compares the texts with one process's. Bad launches get
# clear errors, and a worker rank killed mid-request ends the job non-zero
# instead of leaving it hanging (parts fail: --tp 2, ppfail: --pp 2).
#   tp_test.sh INFERX SOURCE_DIR SHARED_DIR WORK_DIR [run|pp|fail|ppfail]
set -euo pipefail
bin=$1 src=$2 shared=$3 work=$4 part=${5:-run}
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun is missing (scripts/setup installs openmpi-bin)"; exit 77; }
# Open MPI refuses root unless told (CI runs as root); loopback only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo
# ASan builds: Open MPI's own allocations stay live at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
# (stdin closed: mpirun forwards it to rank 0 and would eat a loop's input)
mpi() { timeout -k 5 300 mpirun --oversubscribe --bind-to none -np "$@" </dev/null; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# same MODEL PROMPT N [FLAGS]: greedy completions of one process and of N
# ranks (run --tp N, or FLAGS such as "--pp 2") agree.
same() {
    model=$1 prompt=$2 n=$3 flags=${4:---tp $3}
    "$bin" run -m "$model" -p "$prompt" -n 24 --temp 0 --ignore-eos -t 1 >"$tmp/one" 2>"$tmp/one.err" ||
        { cat "$tmp/one.err" >&2; echo "FAIL: one process on $model"; exit 1; }
    # shellcheck disable=SC2086 # flags are words
    mpi "$n" "$bin" run $flags -m "$model" -p "$prompt" -n 24 --temp 0 --ignore-eos -t 1 >"$tmp/tp" 2>"$tmp/tp.err" ||
        { cat "$tmp/tp.err" >&2; echo "FAIL: $flags on $model"; exit 1; }
    if ! cmp -s "$tmp/one" "$tmp/tp"; then
        echo "FAIL: $flags differs from one process on $model:"
        diff "$tmp/one" "$tmp/tp" || true
        exit 1
    fi
    case "$flags" in
    *--pp*) want="pipeline stage 1 of" ;;
    *) want="tensor parallel over $n ranks" ;;
    esac
    grep -q "$want" "$tmp/tp.err" || { cat "$tmp/tp.err"; echo "FAIL: no report '$want'"; exit 1; }
    echo "ok: $(basename "$model") $flags: $(head -c 60 "$tmp/one" | tr '\n' ' ')"
}

# arch_models FLAGS...: same on every ../shared/arch model with 2 ranks and
# these flags (skipped without the reference or numpy).
arch_models() {
    ref=$shared/arch/reference.json
    if [ ! -f "$ref" ]; then echo "SKIP (arch models): $ref is absent"; return 0; fi
    # the first python3 with numpy (a pyenv shim may shadow Debian's python3-numpy)
    py=""
    for c in python3 /usr/bin/python3; do
        if "$c" -c "import numpy" 2>/dev/null; then py=$c; break; fi
    done
    if [ -z "$py" ]; then echo "SKIP (arch models): python3-numpy is missing"; return 0; fi
    dir=$work/arch-models
    mkdir -p "$dir"
    # file, make command, prompt, sha256 per model
    "$py" - "$ref" >"$tmp/models" <<'PY'
import json, sys
for m in json.load(open(sys.argv[1]))["models"]:
    print("\t".join([m["file"], m["make"], m["cases"][0]["prompt"], m["sha256"]]))
PY
    while IFS=$'\t' read -r file make prompt sha; do
        path=$dir/$file
        if [ ! -f "$path" ] || [ "$(sha256sum "$path" | cut -d' ' -f1)" != "$sha" ]; then
            make=${make//OUT_DIR/$dir}
            (cd "$src" && $py ${make#python3 } >/dev/null)
        fi
        same "$path" "$prompt" 2 "$1"
    done <"$tmp/models"
}

if [ "$part" = run ]; then
    bundled=$src/models/target-f16.gguf
    same "$bundled" "It was on this point that she had" 2
    same "$bundled" "Emma" 3
    # the packed F16 weights and the plain ones (INFERX_REPACK=0) both
    INFERX_REPACK=0 same "$bundled" "It was on this point that she had" 2

    # bad launches: clear errors, exit 2, no hang
    if "$bin" run --tp 2 -p x >/dev/null 2>"$tmp/err"; then echo "FAIL: --tp without mpirun ran"; exit 1; fi
    grep -q "mpirun -np 2" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no mpirun hint"; exit 1; }
    if mpi 2 "$bin" run --tp 3 -p x >/dev/null 2>"$tmp/err"; then echo "FAIL: --tp 3 on 2 ranks ran"; exit 1; fi
    grep -q "the MPI job has 2" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no rank-count error"; exit 1; }
    if mpi 2 "$bin" run --tp 2 -m "$tmp/none.gguf" -p x >/dev/null 2>"$tmp/err"; then
        echo "FAIL: a missing model ran"; exit 1
    fi
    grep -q "none.gguf" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: the missing file is not named"; exit 1; }
    # 7 ranks for 6 heads
    if mpi 7 "$bin" run --tp 7 -p x >/dev/null 2>"$tmp/err"; then echo "FAIL: 7 ranks for 6 heads ran"; exit 1; fi
    grep -q "at most one rank per head" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no heads error"; exit 1; }
    echo "ok: bad launches"

    arch_models "--tp 2"
    exit 0
fi

# start_serve LOG NP ARGS...: inferx serve in the background (under mpirun
# with NP ranks, or alone with NP 0) on a free port; sets job and port, and
# checks /ready (hang guard 300 s, not a timed assertion).
start_serve() {
    log=$1 np=$2
    shift 2
    if [ "$np" -gt 0 ]; then
        timeout 300 mpirun --oversubscribe --bind-to none -np "$np" "$bin" serve --port 0 --access-log off "$@" \
            >"$log.out" 2>"$log" </dev/null &
    else
        timeout 300 "$bin" serve --port 0 --access-log off "$@" >"$log.out" 2>"$log" </dev/null &
    fi
    job=$!
    port=""
    for _ in $(seq 1 1200); do
        port=$(sed -n 's/.* on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n1)
        [ -n "$port" ] && break
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$log" "$log.out"; echo "FAIL: serve $* did not come up"; exit 1; }
    ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/ready")
    [ "$ready" = 200 ] || { cat "$log"; echo "FAIL: /ready says $ready with every rank up"; exit 1; }
}

if [ "$part" = pp ]; then
    bundled=$src/models/target-f16.gguf
    same "$bundled" "It was on this point that she had" 2 "--pp 2"
    # a prompt of 9 tokens in 4 micro-batches; 3 stages of 2 layers each
    same "$bundled" "It was on this point that she had" 2 "--pp 2 --micro-batches 4"
    same "$bundled" "Emma" 3 "--pp 3"
    # TP x PP: 2 stages of 2 tensor-parallel ranks
    same "$bundled" "It was on this point that she had" 4 "--tp 2 --pp 2"
    INFERX_REPACK=0 same "$bundled" "It was on this point that she had" 2 "--pp 2 --micro-batches 3"

    # bad launches: more stages than layers, --micro-batches without --pp, the
    # disk tier, a missing model (every rank), a rank count unlike TP x PP
    if mpi 7 "$bin" run --pp 7 -p x >/dev/null 2>"$tmp/err"; then echo "FAIL: 7 stages for 6 layers ran"; exit 1; fi
    grep -q "at most one stage per layer" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no layers error"; exit 1; }
    if "$bin" run --micro-batches 2 -p x >/dev/null 2>"$tmp/err"; then echo "FAIL: lone --micro-batches ran"; exit 1; fi
    grep -q "needs --pp" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no --micro-batches error"; exit 1; }
    if "$bin" serve --pp 2 --kv-disk-dir "$tmp/kv" >/dev/null 2>"$tmp/err"; then echo "FAIL: disk tier ran"; exit 1; fi
    grep -q "kv-disk-dir" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no disk tier refusal"; exit 1; }
    if mpi 4 "$bin" run --tp 2 --pp 2 -m "$tmp/none.gguf" -p x >/dev/null 2>"$tmp/err"; then
        echo "FAIL: a missing model ran under --tp 2 --pp 2"; exit 1
    fi
    grep -q "none.gguf" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: the missing file is not named"; exit 1; }
    if mpi 2 "$bin" run --tp 2 --pp 2 -p x >/dev/null 2>"$tmp/err"; then echo "FAIL: 2 ranks for 2 x 2 ran"; exit 1; fi
    grep -q "the MPI job has 2" "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no rank-count error"; exit 1; }
    echo "ok: bad pipeline launches"

    # A batch: 6 concurrent greedy requests, prefill in chunks of 16 tokens,
    # a KV pool too small for any two of them (recompute preemption), prefix
    # caching on (two prompts share a prefix): the texts of one process and
    # of --pp 2 and --tp 2 --pp 2 must be the same.
    prompts=("It was on this point that she had" "Emma Woodhouse, handsome, clever, and rich"
        "She was the youngest of the two daughters of a most affectionate, indulgent father; and had" "The" "Mr. Knightley, a sensible man about seven or eight"
        "She was the youngest of the two daughters of a most affectionate, indulgent father")
    batch() {
        tag=$1 np=$2
        shift 2
        start_serve "$tmp/$tag.err" "$np" -t 1 --max-num-batched-tokens 16 "$@"
        pids=()
        for i in "${!prompts[@]}"; do
            curl -s -m 250 "http://127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
                -d "{\"prompt\":\"${prompts[$i]}\",\"max_tokens\":48,\"ignore_eos\":true,\"temperature\":0}" \
                >"$tmp/$tag.$i" &
            pids+=($!)
        done
        for p in "${pids[@]}"; do wait "$p"; done
        curl -s "http://127.0.0.1:$port/metrics" >"$tmp/$tag.metrics"
        kill -TERM "$job"
        wait "$job" || true
        for i in "${!prompts[@]}"; do
            sed -n 's/.*"text":"\([^"]*\)".*/\1/p' "$tmp/$tag.$i" >"$tmp/$tag.text.$i"
            [ -s "$tmp/$tag.text.$i" ] || { cat "$tmp/$tag.$i" "$tmp/$tag.err"; echo "FAIL: $tag request $i"; exit 1; }
        done
        pre=$(sed -n 's/^inferx:num_preemptions_total{.*mode="recompute"} \([0-9.e+]*\)$/\1/p' "$tmp/$tag.metrics")
        hits=$(sed -n 's/^inferx:prefix_cache_hits_total{.*} \([0-9.e+]*\)$/\1/p' "$tmp/$tag.metrics")
        echo "$tag: ${pre:-?} recompute preemptions, ${hits:-?} prompt tokens from the prefix cache"
        [ -n "$pre" ] && [ "$pre" != 0 ] || { echo "FAIL: $tag: no preemption (make the KV pool smaller)"; exit 1; }
    }
    # KV pools of 6 blocks of 16 tokens on rank 0 (36 KiB a block for the whole
    # model; a stage holds half the layers, a tensor-parallel rank half the KV
    # heads: half the bytes each) for 6 sequences of up to 5 blocks each: any
    # two that overlap in time cannot both finish without a preemption
    batch one 0 --kv-cache-mem 220K
    batch pp 2 --pp 2 --kv-cache-mem 110K
    batch tpp 4 --tp 2 --pp 2 --kv-cache-mem 55K
    for tag in pp tpp; do
        for i in "${!prompts[@]}"; do
            cmp -s "$tmp/one.text.$i" "$tmp/$tag.text.$i" ||
                { echo "FAIL: $tag request $i differs:"; cat "$tmp/one.text.$i" "$tmp/$tag.text.$i"; exit 1; }
        done
        echo "ok: $tag batch of ${#prompts[@]} with chunked prefill and preemption: the same texts as one process"
    done

    arch_models "--pp 2"
    exit 0
fi

# fail: serve --tp 2 (or --pp 2), kill rank 1 while a request generates;
# mpirun must end non-zero (bounded by the hang guard, not timed).
flags="--tp 2"
[ "$part" = ppfail ] && flags="--pp 2"
mpirun_log=$tmp/serve.err
# shellcheck disable=SC2086 # flags are words
start_serve "$mpirun_log" 2 $flags -t 1
worker=$(sed -n 's/.*rank 1 (pid \([0-9]*\)).*/\1/p' "$mpirun_log" | head -n1)
[ -n "$worker" ] || { cat "$mpirun_log"; echo "FAIL: rank 1 did not say its pid"; exit 1; }
curl -s -m 100 "http://127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
    -d '{"prompt":"It was","max_tokens":400,"ignore_eos":true,"temperature":0,"stream":true}' \
    >"$tmp/stream" 2>/dev/null &
client=$!
for _ in $(seq 1 600); do
    grep -q '"text"' "$tmp/stream" 2>/dev/null && break
    sleep 0.1
done
grep -q '"text"' "$tmp/stream" || { cat "$tmp/stream"; echo "FAIL: the request never streamed"; exit 1; }
kill -9 "$worker"
set +e
wait "$job"
rc=$?
set -e
wait "$client" 2>/dev/null || true
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    cat "$mpirun_log"; echo "FAIL: the job ended with $rc after rank 1 was killed (0: unnoticed, 124: hung)"; exit 1
fi
echo "ok: $flags: rank 1 killed mid-request: the job ended with $rc"
tail -n 5 "$mpirun_log"
