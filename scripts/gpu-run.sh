#!/usr/bin/env bash
# The GPU half of loom's checks in one command, on a machine with an NVIDIA GPU, the CUDA toolkit
# and CMake but none of loom's Debian packages (no LLVM, no nlohmann-json, no Google Benchmark):
#
#   scripts/gpu-run.sh pack              # on a Debian machine with the packages: copies the
#                                        # header-only dependencies into .deps/include
#   scripts/gpu-run.sh [build-dir]       # on the GPU machine (with .deps/ carried along)
#
# The second form configures loom without LLVM, builds the CUDA tests and gpu_check, runs every
# test labelled cuda or gpu, then gpu_check (sampled GPU programs of 8 ops against the DAG
# interpreter). When Google Benchmark is installed it also builds bench_gpu and runs the tuned
# GEMM 4096^3 and conv2d against cuBLAS and cuDNN (LOOM_GPU_TRIALS programs per workload,
# default 800, records in LOOM_GPU_RECORDS, default <build-dir>/gpu_tuned.jsonl).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ ${1:-} == pack ]]; then
  mkdir -p "$root/.deps/include"
  for d in nlohmann doctest; do
    cp -r "/usr/include/$d" "$root/.deps/include/"
  done
  echo "header-only dependencies copied to $root/.deps/include"
  exit 0
fi

build=${1:-$root/build-gpu}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_ENABLE_LLVM=OFF \
  -DLOOM_ENABLE_EIGEN=OFF -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_HEADERS_DIR="$root/.deps/include"
targets=(loom_tests_cuda_nvrtc loom_tests_cuda_device loom_tests_cuda_measure loom_fake_libcuda
         gpu_check)
if grep -q "^benchmark_DIR:PATH=.*benchmark" "$build/CMakeCache.txt" 2>/dev/null &&
   ! grep -q "^benchmark_DIR:PATH=benchmark_DIR-NOTFOUND" "$build/CMakeCache.txt"; then
  targets+=(bench_gpu)
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
# Every step runs even when an earlier one failed; the exit status says whether any did.
status=0
ctest --test-dir "$build" -L 'cuda|gpu' --output-on-failure || status=1
"$build/benchmarks/gpu_check" 50 || status=1
if [[ -x $build/benchmarks/bench_gpu ]]; then
  "$build/benchmarks/bench_gpu" --trials="${LOOM_GPU_TRIALS:-800}" \
    --records="${LOOM_GPU_RECORDS:-$build/gpu_tuned.jsonl}" || status=1
fi
exit $status
