# Helpers of bench/tp_bench.sh and bench/pp_bench.sh, sourced with their
# arguments [BUILD_DIR] [REPS] [MODEL]: mpirun on one machine, medians, the
# rates inferx prints, and a temporary directory removed at exit.
build=${1:-build} reps=${2:-5}
bin=$build/bin/inferx
model=${3:-$(dirname "${BASH_SOURCE[0]}")/../models/target-f16.gguf}
prompt="It was on this point that she had"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_tcp_if_include=lo
mpi() { timeout 600 mpirun --oversubscribe --bind-to none -np "$@" </dev/null; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
decode_rate() { sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) tokens\/s.*/\1/p' "$1"; }
batched_rate() { awk '$1 == "concurrent" && $2 ~ /^[0-9.]+$/ {print $3}' "$1"; }
