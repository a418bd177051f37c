#!/usr/bin/env bash
# Runs a command with the same floating-point arithmetic on every x86-64 CPU with AVX2 and FMA.
#
#   scripts/exact.sh .venv/bin/python -m chunklab.stages.sim_tuning --params params.yaml ...
#
# The stages whose outputs are committed as exact (sim_*, cost_models) must come out byte for
# byte the same on any machine. Their own code is plain Python, but numpy and its OpenBLAS pick
# their vector loops by CPU, and the last bit they round differs: on an Intel Xeon (AVX-512) the
# Optuna sweep of sim_tuning proposed another 15th trial than on the AMD EPYCs (AVX2) that made
# the committed trials, and cost_models' roofline fit landed in another optimum. With the
# settings below the Xeon reproduced both byte for byte (2026-12-02). Both are read when the
# libraries load, so they are set here, before Python starts.
set -euo pipefail

# numpy: no AVX-512 loops (exp, log, reductions); names of numpy 2.x and 1.x, unknown ones ignored
export NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL"
# OpenBLAS (numpy's and scipy's): one thread, and its Haswell (AVX2 + FMA) kernels where the CPU has them
export OPENBLAS_NUM_THREADS=1
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
if [[ $(uname -m) == x86_64 && " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then
  export OPENBLAS_CORETYPE=Haswell
else
  echo "scripts/exact.sh: this CPU ($(uname -m)) lacks AVX2/FMA: OpenBLAS keeps its own kernels, and" \
       "outputs may differ from the committed ones in the last digits" >&2
fi
exec "$@"
