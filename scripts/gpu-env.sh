# shellcheck shell=bash
# Sourced by scripts/gpu-check.sh and bench/gpu_speed.sh: puts the bundle scripts/gpu-bundle.sh made
# on this machine and its environment in force.
#   gpu_bundle_env TAG BUNDLE   (BUNDLE: BUNDLE.tar.xz, unpacked under ${TMPDIR:-/tmp}/trident-gpu-bundle,
#                                or its folder; TAG names the caller in messages)
# Sets BUNDLE to the unpacked folder (absolute), sources its env.sh (its libraries, Open MPI
# relocated, its bin/ on PATH) and adds CUDA's libraries: the toolkit's, else pip's (PyTorch's)
# cuBLAS, and pip's NCCL (nvidia-nccl-cu13) when python3 has it. Exits 2 with one line when there is no bundle.
gpu_bundle_env() {
  local tag=$1 dir d
  BUNDLE=$2
  if [ -f "$BUNDLE" ]; then # the archive the device tool carried: unpack it (xz, or Python's lzma)
    dir=${TMPDIR:-/tmp}/trident-gpu-bundle
    rm -rf "$dir" && mkdir -p "$dir"
    { xz -dc "$BUNDLE" 2>/dev/null || python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$BUNDLE"; } |
      tar xf - -C "$dir" || { echo "$tag: cannot unpack $BUNDLE" >&2; exit 2; }
    BUNDLE=$dir
  fi
  [ -d "$BUNDLE" ] && BUNDLE=$(cd "$BUNDLE" && pwd) # the runs change folder
  [ -f "$BUNDLE/env.sh" ] || { echo "$tag: no bundle at $BUNDLE: run scripts/gpu-bundle.sh where trident was built" >&2; exit 2; }
  # shellcheck source=/dev/null
  source "$BUNDLE/env.sh"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  done
  # pip's cuBLAS (PyTorch's), where the toolkit has none
  for d in $(python3 -c 'import nvidia.cu13, os; print(os.path.dirname(nvidia.cu13.__file__) + "/lib")' 2>/dev/null) \
           $(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null); do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  done
  # NCCL (--comm nccl, docs/gpu.md "NCCL"): pip's nvidia-nccl-cu13, opened by trident at run time;
  # the bundle carries none
  d=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0] + "/lib")' 2>/dev/null)
  if [ -n "$d" ] && [ -e "$d/libnccl.so.2" ]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  elif ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2' && ! ls /usr/local/cuda/lib*/libnccl.so.2 >/dev/null 2>&1; then
    echo "$tag: no libnccl.so.2 (pip's nvidia-nccl-cu13 not found under python3's site-packages): the NCCL steps skip" >&2
  fi
  return 0
}
