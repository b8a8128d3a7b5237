#!/usr/bin/env bash
# Prepares what a GPU machine without a package registry needs to run trident's GPU check
# (scripts/gpu-check.sh, docs/gpu.md): the binaries built here, the shared libraries they load
# (and those trident opens when first needed) that are not CUDA's or the C library's, Open MPI's runtime (its components, relocated with
# OPAL_PREFIX), GPT-2's tokenizer files and tinyshakespeare preprocessed. The CUDA libraries
# (cuBLAS) are the GPU machine's own. The bundle is a folder git ignores, for the device tool's
# `carry` (64 MiB with the working tree): BUNDLE.tar.xz.
#   scripts/gpu-bundle.sh [BUILD [BUNDLE]]   (default: build, BUILD/gpu-bundle; writes BUNDLE/ and BUNDLE.tar.xz)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
B=${2:-$BUILD/gpu-bundle}
DATA=${TRIDENT_SHARED_DATA:-$ROOT/../shared/data}
[ -f "$DATA/gpt2/vocab.json" ] || DATA=$ROOT/data
die() { echo "gpu-bundle: $*" >&2; exit 1; }
grep -q '^TRIDENT_HAVE_CUDA:INTERNAL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null ||
  grep -q 'CUDA backend: nvcc' "$BUILD/CMakeFiles/CMakeOutput.log" 2>/dev/null ||
  [ -n "$(nm "$BUILD/trident" 2>/dev/null | grep ' T be_cuda$')" ] ||
  die "$BUILD/trident has no CUDA backend: configure where nvcc is (-DTRIDENT_CUDA=ON) and build"
[ -f "$DATA/gpt2/vocab.json" ] && [ -f "$DATA/tinyshakespeare.txt" ] ||
  die "no GPT-2 vocabulary or tinyshakespeare under $DATA: scripts/get-data.sh"
GPU_TESTS=(test_gpu_backend test_cuda_elementwise test_cuda_attention_moe test_gpu_nccl)
TOOLS=(compare_runs gpu_attention) # the layout matrix's comparison (tests/parallel/compare_runs.c), attention alone (bench/gpu_attention.c)
cmake --build "$BUILD" -j 2 --target trident "${GPU_TESTS[@]}" "${TOOLS[@]}" >/dev/null

rm -rf "$B" && mkdir -p "$B/bin" "$B/lib" "$B/data"
for exe in trident "${GPU_TESTS[@]}" "${TOOLS[@]}"; do
  f=$(find "$BUILD" -maxdepth 2 -type f -name "$exe" -perm -u+x | head -1)
  [ -n "$f" ] || die "$exe not built in $BUILD"
  strip --strip-debug -o "$B/bin/$exe" "$f" # line tables stay: compute-sanitizer's backtraces name functions
done

# Open MPI as Debian installs it, under a prefix of the bundle's (OPAL_PREFIX relocates it).
ompi_path() { ompi_info --path "$1" --parsable | cut -d: -f3; }
PREFIX=$(ompi_path prefix) PKGLIB=$(ompi_path pkglibdir) PKGDATA=$(ompi_path pkgdatadir)
O=$B/ompi/usr
mkdir -p "$O/bin" "$O${PKGLIB#"$PREFIX"}" "$O${PKGDATA#"$PREFIX"}"
cp -a "$PKGLIB"/. "$O${PKGLIB#"$PREFIX"}/"
cp -a "$PKGDATA"/. "$O${PKGDATA#"$PREFIX"}/"
for t in orterun orted; do cp -L "$(command -v $t)" "$O/bin/$t"; done
ln -sf orterun "$O/bin/mpirun"
PMIX=$(ls -d /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix 2>/dev/null || true)
[ -n "$PMIX" ] && mkdir -p "$B/ompi/pmix" && cp -a "$PMIX"/. "$B/ompi/pmix/"

# The closure of shared libraries, less the C runtime and CUDA's own (the GPU machine has them).
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libutil|libresolv|libgcc_s|libstdc\+\+|libcuda\.|libcublas|libcudart|libnvidia)'
objs=("$B/bin/trident" "$O/bin/orterun" "$O/bin/orted")
for exe in "${GPU_TESTS[@]}" "${TOOLS[@]}"; do objs+=("$B/bin/$exe"); done
objs+=("$O${PKGLIB#"$PREFIX"}"/*.so)
# and the libraries trident opens when a command first needs them (include/core/trident/dynlib.h:
# libmicrohttpd for serve, oneDNN for --bf16 on an AVX512-BF16 host, ICU for text), which ldd does
# not list: each under its SONAME, with its own closure
for var in MHD_LIB DNNL_LIB ICU_UC_LIB; do
  lib=$(sed -n "s/^$var:FILEPATH=//p" "$BUILD/CMakeCache.txt")
  [ -n "$lib" ] && [ -e "$lib" ] || die "no $var in $BUILD/CMakeCache.txt (a library trident opens at run time)"
  soname=$(objdump -p "$(readlink -f "$lib")" | awk '$1 == "SONAME" {print $2}')
  cp -L "$lib" "$B/lib/$soname"
  objs+=("$(readlink -f "$lib")")
done
[ -d "$B/ompi/pmix" ] && objs+=("$B/ompi/pmix"/*.so)
for o in "${objs[@]}"; do ldd "$o" 2>/dev/null; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] && continue
    cp -L "$path" "$B/lib/$name"
  done
strip --strip-unneeded "$B"/lib/*.so* 2>/dev/null || true

# Data: the tokenizer files and tinyshakespeare as a Megatron dataset (made by this trident).
cp "$DATA/gpt2/vocab.json" "$DATA/gpt2/merges.txt" "$B/data/"
tmp=$(mktemp -d)
"$ROOT/scripts/text-to-jsonl.sh" "$DATA/tinyshakespeare.txt" "$tmp/ts.jsonl"
"$BUILD/trident" preprocess --input "$tmp/ts.jsonl" --output-prefix "$B/data/ts" --vocab-file "$DATA/gpt2/vocab.json" \
  --merge-file "$DATA/gpt2/merges.txt" --append-eod --workers 2 >"$tmp/pre.log" 2>&1 || { cat "$tmp/pre.log"; die "preprocess failed"; }
# the layout matrix's data (tests/parallel/layouts.cmake): 1500 documents tokenized by bytes
"$ROOT/scripts/text-to-jsonl.sh" "$DATA/tinyshakespeare.txt" "$tmp/ts1500.jsonl" 1500
python3 "$ROOT/tests/parallel/byte_tokenizer.py" "$B/data/bytes.json"
"$BUILD/trident" preprocess --input "$tmp/ts1500.jsonl" --output-prefix "$B/data/bytes" --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model "$B/data/bytes.json" --append-eod >"$tmp/pre.log" 2>&1 || { cat "$tmp/pre.log"; die "preprocess (bytes) failed"; }
# BERT's, where scripts/test-deps.sh has rebuilt bert-base-uncased's vocabulary
if [ -f "$BUILD/node/bert/vocab.txt" ]; then
  cp "$BUILD/node/bert/vocab.txt" "$B/data/bert_vocab.txt"
  "$ROOT/scripts/text-to-jsonl.sh" "$DATA/tinyshakespeare.txt" "$tmp/bert.jsonl" 6000
  "$BUILD/trident" preprocess --input "$tmp/bert.jsonl" --output-prefix "$B/data/bert" --split-sentences \
    --tokenizer-type BertWordPieceLowerCase --vocab-file "$B/data/bert_vocab.txt" >"$tmp/pre.log" 2>&1 ||
    { cat "$tmp/pre.log"; die "preprocess (BERT) failed"; }
else
  echo "gpu-bundle: no $BUILD/node/bert/vocab.txt (scripts/test-deps.sh $BUILD): the check's BERT run will say so" >&2
fi
rm -rf "$tmp"
# issue 35's speed comparison (bench/gpu_speed.sh): the PyTorch GPT-2 peer, since the GPU machine
# gets the working tree but not ../shared, and llm.c's train_gpt2cu with its token files where
# bench/llmc-build.sh made them (LLMC, default BUILD/llmc)
PEER=$ROOT/../shared/bench/peer_torch_gpt2.py
if [ -f "$PEER" ]; then mkdir -p "$B/peer" && cp "$PEER" "$B/peer/"
else echo "gpu-bundle: no $PEER: bench/gpu_speed.sh will run without the PyTorch GPT-2 peer" >&2; fi
LLMC=${LLMC:-$BUILD/llmc}
if [ -x "$LLMC/train_gpt2cu" ]; then # with its token files: the tinyshakespeare above, in llm.c's format
  mkdir -p "$B/llmc" && cp "$LLMC/train_gpt2cu" "$B/llmc/"
  [ -f "$LLMC/REVISION" ] && cp "$LLMC/REVISION" "$B/llmc/"
  python3 "$ROOT/bench/llmc_tokens.py" "$B/data/ts_text_document" "$B/llmc/ts" >/dev/null || die "llmc_tokens.py failed"
else
  echo "gpu-bundle: no llm.c in $LLMC (bench/llmc-build.sh): bench/gpu_speed.sh will say so" >&2
fi

cat >"$B/env.sh" <<'ENV'
# Sourced by scripts/gpu-check.sh: the bundle's libraries before the machine's, Open MPI relocated.
TD_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$TD_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$TD_BUNDLE/ompi/usr" PMIX_MCA_mca_base_component_path="$TD_BUNDLE/ompi/pmix"
export PATH="$TD_BUNDLE/bin:$TD_BUNDLE/ompi/usr/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_ess_singleton_isolated=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
ENV
{
  echo "built $(date -u +%FT%TZ) from $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo +changes) on $(hostname)"
  (cd "$B" && find . -type f -printf '%s %p\n' | sort -k2)
} >"$B/MANIFEST"
# What travels: one xz archive (139 MB of files are 29 MB so, 49 MB gzipped; the device tool
# carries 64 MiB with the working tree). scripts/gpu-check.sh unpacks it.
tar cf - -C "$B" . | xz -T2 -6 >"$B.tar.xz.tmp" && mv "$B.tar.xz.tmp" "$B.tar.xz"
echo "gpu-bundle: $B, $(du -sh "$B" | cut -f1) ($(find "$B" -type f | wc -l) files), packed as $B.tar.xz ($(du -h "$B.tar.xz" | cut -f1))"
