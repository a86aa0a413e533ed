#!/bin/sh
# The figures of docs/quantization.md "Quantizing a model", in one run:
# 1. target-f32.gguf quantized to Q8_0, Q6_K, Q5_K_M, Q4_K_M and Q4_0: file size,
#    perplexity of the whole held-out text at -c 256, KL divergence and top-token
#    agreement against the F32 model (the baseline, measured first in the same run);
# 2. 4-bit calibration: RTN, --imatrix and --method gptq, the imatrix (with X^T X)
#    from the held-out text after byte 44,168, scored on its first 38 chunks of 256
#    tokens (which end before that byte).
# usage: bench/quant_quality.sh INFERX SHARED_DIR TMP_DIR [THREADS]
set -eu
bin=$1 shared=$2 tmp=$3 t=${4:-2}
f32=$shared/models/target-f32.gguf text=$shared/models/heldout.txt
mkdir -p "$tmp"
cd "$tmp"
row() { # row LABEL FILE.json SIZE: one table row from a --kl-divergence --json run
    python3 -c "import json,sys; d=json.load(open(sys.argv[2]))
print('| %s | %s | %.4f ± %.4f | %.6f ± %.6f | %.2f%% ± %.2f%% |' % (sys.argv[1], format(int(sys.argv[3]), ','),
      d['ppl'], d['ppl_pm'], d['kld']['mean'], d['kld']['mean_pm'], 100 * d['same_top'], 100 * d['same_top_pm']))" "$@"
}
"$bin" perplexity -m "$f32" -f "$text" -c 256 -t "$t" --kl-divergence-base full.kld --json >f32.json 2>/dev/null
echo "| type | bytes | PPL | KLD vs F32 | same top token |"
echo "|---|---|---|---|---|"
python3 -c "import json,sys; d=json.load(open('f32.json')); print('| F32 (baseline) | %s | %.4f ± %.4f | — | — |' % (format(int(sys.argv[1]), ','), d['ppl'], d['ppl_pm']))" "$(wc -c <"$f32")"
for ty in Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0; do
    "$bin" quantize "$f32" "t-$ty.gguf" "$ty" -t "$t" 2>/dev/null
    "$bin" perplexity -m "t-$ty.gguf" --kl-divergence-base full.kld --kl-divergence -t "$t" --json >"t-$ty.json" 2>/dev/null
    row "$ty" "t-$ty.json" "$(wc -c <"t-$ty.gguf")"
done
rm -f full.kld

python3 -c "import sys; b=open(sys.argv[1],'rb').read(); i=b.index(b'\n',44000)+1; open('calib.txt','wb').write(b[i:])" "$text"
"$bin" imatrix -m "$f32" -f calib.txt -o cal.dat -c 256 --xtx -t "$t" 2>/dev/null
"$bin" perplexity -m "$f32" -f "$text" -c 256 --chunks 38 -t "$t" --kl-divergence-base half.kld --json >half.json 2>/dev/null
echo
echo "| Q4_0, first 38 chunks | PPL | KLD vs F32 | same top token | quantize time |"
echo "|---|---|---|---|---|"
python3 -c "import json; d=json.load(open('half.json')); print('| F32 (baseline) | %.4f ± %.4f | — | — | — |' % (d['ppl'], d['ppl_pm']))"
for m in rtn imatrix gptq; do
    case $m in rtn) a= ;; imatrix) a="--imatrix cal.dat" ;; gptq) a="--imatrix cal.dat --method gptq" ;; esac
    # shellcheck disable=SC2086
    "$bin" quantize "$f32" "c-$m.gguf" Q4_0 $a -t "$t" 2>"c-$m.log"
    "$bin" perplexity -m "c-$m.gguf" --kl-divergence-base half.kld --kl-divergence -t "$t" --json >"c-$m.json" 2>/dev/null
    python3 -c "import json,sys,re; d=json.load(open(sys.argv[2])); s=re.search(r'in ([0-9.]+) s', open(sys.argv[3]).read()).group(1)
print('| %s | %.4f ± %.4f | %.6f ± %.6f | %.2f%% | %s s |' % (sys.argv[1], d['ppl'], d['ppl_pm'], d['kld']['mean'], d['kld']['mean_pm'], 100 * d['same_top'], s))" "$m" "c-$m.json" "c-$m.log"
done
rm -f half.kld
