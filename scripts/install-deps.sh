#!/usr/bin/env bash
# Installs the Debian (bookworm) packages loom needs to build and run its tests (the default) or
# only its demo (--demo). Idempotent: apt-get runs only when a package of the list is missing.
set -euo pipefail

# What the main demo needs (scripts/demo.sh: install-deps.sh --demo): the compiler, the JIT,
# the records' JSON and Eigen, the demo's contender.
demo_packages=(
  cmake g++ make ninja-build  # toolchain (the scripts configure new build directories for Ninja)
  llvm-19-dev             # loom::llvm, the ORC CPU JIT backend
  libeigen3-dev           # loom::eigen interop and reference kernels
  nlohmann-json3-dev      # tuning records
)
# Everything the whole test suite builds and runs (scripts/test.sh, CI): the default.
test_packages=(
  "${demo_packages[@]}"
  doctest-dev             # tests
  libbenchmark-dev        # benchmarks (CI builds them, never runs them)
  libopenblas-dev         # benchmark baselines
  libdnnl-dev             # benchmark baselines
  ocl-icd-opencl-dev      # oneDNN's CMake config looks for OpenCL (Debian builds its GPU runtime)
  zlib1g-dev              # cost-model data set (benchmarks)
  libonnx-dev libprotobuf-dev  # loom::onnx, the ONNX importer
  libonnx-testdata        # the ONNX node tests the importer is checked against
  libcli11-dev            # loomc, the command-line driver
  libopenmpi-dev openmpi-bin  # loom::mpi, tuning across machines; its test runs under mpirun
  clang-format-19         # the layout check (ctest clang_format, .clang-format)
)
packages=("${test_packages[@]}")
# Opt-in extras, for benchmarks that CI never builds or runs:
#   --demo     only the demo's packages (above) instead of the test suite's
#   --halide   Halide 14 and its autoschedulers (configure with -DLOOM_BENCH_HALIDE=ON)
#   --torch    PyTorch, torchvision, onnx and numpy for Python (scripts/export-models.sh and
#              benchmarks/net, never CI's tests)
#   --xgboost  XGBoost, bench_cost_model's optional contender
#   --fuzz     clang-19 (libFuzzer, sanitizers) for the fuzz targets of tests/fuzz
for arg in "$@"; do
  case "$arg" in
    --demo) packages=("${demo_packages[@]}") ;;
    --halide) packages+=(libhalide14-0-dev) ;;
    --torch) packages+=(python3-torch python3-torchvision python3-onnx python3-numpy) ;;
    --xgboost) packages+=(libxgboost-dev) ;;
    --fuzz) packages+=(clang-19) ;;
    *) echo "install-deps: unknown option $arg (known: --demo, --halide, --torch, --xgboost, --fuzz)" >&2
       exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
