#!/bin/sh
# The figures of docs/kv-cache.md "Quantized K/V", in one run:
# 1. perplexity of target-f32.gguf on the whole held-out text (512-token chunks)
#    with each KV cache type, against the f16 cache measured first in the same
#    run: PPL, its change, KL divergence and top-token agreement (perplexity
#    --kl-divergence over the f16 run's saved distributions);
# 2. bench --throughput with every type in the same KV memory (8 sequences of
#    32 + 224 tokens in f16, 16 prompts at once): blocks, whole sequences that
#    fit, mean running sequences, preemptions, output tokens/s, f16 first;
# 3. attn_bench (when built): the attention kernel per type against f16, one
#    thread, per ISA path.
# usage: bench/kv_quant.sh INFERX SHARED_DIR TMP_DIR [THREADS] [ATTN_BENCH]
set -eu
bin=$1 shared=$2 tmp=$3 t=${4:-2} attn=${5:-}
model=$shared/models/target-f32.gguf text=$shared/models/heldout.txt
mkdir -p "$tmp"
cd "$tmp"
"$bin" perplexity -m "$model" -f "$text" -t "$t" --kv-cache-dtype f16 --kl-divergence-base kv.kld --json \
    >kv-f16.json 2>/dev/null
echo "| KV type | PPL | change vs f16 | KLD vs f16 | same top token |"
echo "|---|---|---|---|---|"
python3 -c "import json; d=json.load(open('kv-f16.json')); print('| f16 (baseline) | %.4f ± %.4f | — | — | — |' % (d['ppl'], d['ppl_pm']))"
for ty in f32 bf16 q8_0 fp8_e4m3 q4_0; do
    "$bin" perplexity -m "$model" -t "$t" --kv-cache-dtype "$ty" --kl-divergence-base kv.kld --kl-divergence \
        --json >"kv-$ty.json" 2>/dev/null
    python3 -c "import json,sys; b=json.load(open('kv-f16.json')); d=json.load(open(sys.argv[2]))
print('| %s | %.4f ± %.4f | %+.3f%% | %.6f ± %.6f | %.2f%% ± %.2f%% |' % (sys.argv[1], d['ppl'], d['ppl_pm'],
      100 * (d['ppl'] / b['ppl'] - 1), d['kld']['mean'], d['kld']['mean_pm'], 100 * d['same_top'], 100 * d['same_top_pm']))" \
        "$ty" "kv-$ty.json"
done
rm -f kv.kld
echo
"$bin" bench --throughput -m "$model" --num-prompts 16 --max-concurrency 16 --input-len 32 --output-len 224 \
    -t "$t" --kv-cache-dtype f16,bf16,q8_0,fp8_e4m3,q4_0 --kv-cache-mem 4718592
if [ -n "$attn" ]; then
    echo
    "$attn" -r 5
fi
