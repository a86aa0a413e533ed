#!/usr/bin/env bash
# Tensor parallelism end to end (docs/distributed.md): `mpirun -np N inferx
# run --tp N` must print the same greedy completion as one process, on the
# bundled model (2 and 3 ranks: 3 splits a KV head's query heads over two
# ranks) and on the ../shared/arch models of every architecture (generated
# as tests/test_arch.c does; skipped without ../shared or numpy). Then bad
# launches get clear errors, and a worker rank killed mid-request ends the
# job non-zero instead of leaving it hanging.
#   tp_test.sh INFERX SOURCE_DIR SHARED_DIR WORK_DIR [run|fail]
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

# same MODEL PROMPT N: greedy completions of one process and of N ranks agree.
same() {
    model=$1 prompt=$2 n=$3
    "$bin" run -m "$model" -p "$prompt" -n 24 --temp 0 --ignore-eos -t 1 >"$tmp/one" 2>"$tmp/one.err" ||
        { cat "$tmp/one.err" >&2; echo "FAIL: one process on $model"; exit 1; }
    mpi "$n" "$bin" run --tp "$n" -m "$model" -p "$prompt" -n 24 --temp 0 --ignore-eos -t 1 >"$tmp/tp" 2>"$tmp/tp.err" ||
        { cat "$tmp/tp.err" >&2; echo "FAIL: --tp $n on $model"; exit 1; }
    if ! cmp -s "$tmp/one" "$tmp/tp"; then
        echo "FAIL: --tp $n differs from one process on $model:"
        diff "$tmp/one" "$tmp/tp" || true
        exit 1
    fi
    grep -q "tensor parallel over $n ranks" "$tmp/tp.err" || { cat "$tmp/tp.err"; echo "FAIL: no tp report"; exit 1; }
    echo "ok: $(basename "$model") --tp $n: $(head -c 60 "$tmp/one" | tr '\n' ' ')"
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

    ref=$shared/arch/reference.json
    if [ ! -f "$ref" ]; then echo "SKIP (arch models): $ref is absent"; exit 0; fi
    # the first python3 with numpy (a pyenv shim may shadow Debian's python3-numpy)
    py=""
    for c in python3 /usr/bin/python3; do
        if "$c" -c "import numpy" 2>/dev/null; then py=$c; break; fi
    done
    if [ -z "$py" ]; then echo "SKIP (arch models): python3-numpy is missing"; exit 0; fi
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
        same "$path" "$prompt" 2
    done <"$tmp/models"
    exit 0
fi

# fail: serve --tp 2, kill rank 1 while a request generates; mpirun must end
# non-zero (bounded by the hang guard, not timed).
port_file=$tmp/port
mpirun_log=$tmp/serve.err
timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$bin" serve --tp 2 --port 0 -t 1 \
    --access-log off >"$tmp/serve.out" 2>"$mpirun_log" &
job=$!
port=""
for _ in $(seq 1 600); do
    port=$(sed -n 's/.* on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$mpirun_log" | head -n1)
    [ -n "$port" ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
done
[ -n "$port" ] || { cat "$mpirun_log"; echo "FAIL: serve --tp 2 did not come up"; exit 1; }
ready=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/ready")
[ "$ready" = 200 ] || { echo "FAIL: /ready says $ready with every rank up"; exit 1; }
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
echo "ok: rank 1 killed mid-request: the job ended with $rc"
tail -n 5 "$mpirun_log"
