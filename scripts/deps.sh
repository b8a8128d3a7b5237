#!/usr/bin/env bash
# Install the Debian packages trident builds and tests with (and, with --bench, benchmarks with), if any are missing.
# As root: apt-get update + apt-get install. Otherwise: print the exact command and fail.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin
      libpcre2-dev libcjson-dev libcmocka-dev zlib1g-dev libzstd-dev libicu-dev libmicrohttpd-dev curl
      protobuf-compiler python3-numpy) # protoc --decode_raw reads the TensorBoard files in the tests; numpy:
      # e2e/lm_eval_flow's float64 reader of a model
# Slurm for the emulated cluster's `--slurm` (scripts/cluster-slurm.sh, tests/cluster/slurm.sh)
pkgs+=(slurmctld slurmd slurm-client munge)
# --fuzz: the fuzzers' compiler; --bench: PyTorch for the benchmarks' peers (bench/peer_torch_*.py;
# the tests never need it)
for opt in "$@"; do
  case $opt in
    --fuzz) pkgs+=(clang) ;;
    --bench) pkgs+=(python3-torch) ;;
    *) echo "deps: unknown option $opt (--fuzz, --bench)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run the reference tokenizer in the tests; any install that provides the commands
# will do (some bundle npm inside nodejs, which then conflicts with Debian's npm package).
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
# ninja-build, wanted but not needed: CMake's Ninja generator keeps both cores busy where make's
# recursion left one idle (a fresh build: 64 s against 106 s of wall on 2 cores, 2026-11-28); the
# Makefile uses it when it is there and make otherwise. Installed with the others as root.
if ! command -v ninja >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  if [ ${#missing[@]} -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends ninja-build >/dev/null 2>&1 ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends ninja-build >/dev/null 2>&1; }; } ||
      echo "deps: ninja-build not installed (the build uses make)" >&2
  else
    missing+=(ninja-build)
  fi
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "deps: missing Debian packages. Run as root:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
