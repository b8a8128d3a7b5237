#!/usr/bin/env bash
# Builds llm.c's train_gpt2cu (karpathy/llm.c, the peer of issue 35; none of its code goes into
# trident) beside trident, for bench/gpu_speed.sh on a GPU machine:
#   bench/llmc-build.sh SRC [OUT]   (SRC: an exported llm.c tree, e.g.
#     git --git-dir=<mirror of github:karpathy/llm.c> archive HEAD | tar -x -C build/llmc-src;
#     OUT: default build/llmc)
# bf16, no cuDNN (its flash attention needs cudnn-frontend's headers), no MPI, no NCCL, no NVML:
# one GPU. Code for sm_90 (H100/H200) and sm_80 (A100), with PTX for sm_90 so a newer GPU JITs it.
# scripts/gpu-bundle.sh then takes OUT/train_gpt2cu into the bundle, with the bundle's GPT-2-tokenized
# tinyshakespeare converted to llm.c's token files (bench/llmc_tokens.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SRC=${1:?usage: bench/llmc-build.sh LLMC_SRC [OUT]}
OUT=${2:-$ROOT/build/llmc}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -f "$SRC/train_gpt2.cu" ] || { echo "llmc-build: no train_gpt2.cu in $SRC: export llm.c's tree there" >&2; exit 2; }
[ -x "$NVCC" ] || { echo "llmc-build: no nvcc (set NVCC=/path/to/nvcc)" >&2; exit 2; }
mkdir -p "$OUT"
ARCHS=${ARCHS:-"80 90"}
GEN=()
for a in $ARCHS; do GEN+=(-gencode "arch=compute_$a,code=sm_$a"); done
GEN+=(-gencode "arch=compute_90,code=compute_90")
# CUDA 13 dropped cudaMemAdvise's int-device overload (a cudaMemLocation now): llm.c's one call,
# its managed-memory fallback, patched in the exported tree (not in trident)
if "$NVCC" --version | grep -q 'release 1[3-9]'; then
  sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
    "$SRC/llmc/cuda_utils.cuh"
fi
# the Makefile's flags (USE_CUDNN=0, NO_MULTI_GPU=1, NO_USE_MPI=1, PRECISION=BF16), threads bounded
(cd "$SRC" && "$NVCC" --threads "${NVCC_THREADS:-2}" --use_fast_math -std=c++17 -O3 -DENABLE_BF16 "${GEN[@]}" \
   train_gpt2.cu -lcublas -lcublasLt -o "$OUT/train_gpt2cu.tmp")
mv "$OUT/train_gpt2cu.tmp" "$OUT/train_gpt2cu"
git -C "$SRC" rev-parse HEAD >"$OUT/REVISION" 2>/dev/null || cat "$SRC/REVISION" >"$OUT/REVISION" 2>/dev/null || true
echo "llmc-build: $OUT/train_gpt2cu ($(du -h "$OUT/train_gpt2cu" | cut -f1))"
