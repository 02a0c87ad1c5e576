#!/usr/bin/env bash
# The GPU half of loom's checks in one command, on a machine with an NVIDIA GPU, the CUDA toolkit
# and CMake but none of loom's Debian packages (no LLVM, no nlohmann-json, no Google Benchmark):
#
#   scripts/gpu-run.sh pack              # on a Debian machine with the packages: copies the
#                                        # header-only dependencies into .deps/include and
#                                        # Google Benchmark (headers, library, CMake package)
#                                        # into .deps/benchmark
#   scripts/gpu-run.sh [build-dir]       # on the GPU machine (with .deps/ carried along)
#
# The second form configures loom without LLVM, builds the CUDA tests and gpu_check, runs every
# test labelled cuda or gpu, then gpu_check (sampled GPU programs of 24 workloads against the DAG
# interpreter, LOOM_GPU_CHECK_PER_OP per op, default 50). With Google Benchmark (installed, or
# packed) it also builds bench_gpu, tunes each workload for LOOM_GPU_TRIALS programs (default 800;
# 0 skips tuning; records in LOOM_GPU_RECORDS, default <build-dir>/gpu_tuned.jsonl) and times
# the tuned kernels against cuBLAS, cuDNN and the DRAM's bandwidth. LOOM_GPU_WORKLOADS (comma-
# separated name prefixes, e.g. softmax,layer_norm) restricts bench_gpu's workloads, and
# LOOM_GPU_STEPS (default "ctest check bench torch") the steps, LOOM_GPU_CTEST_LABELS (default
# "cuda|gpu"; "gpu" for the real-device tests alone) the tests. bench_gpu writes each tuned
# workload's best-so-far curve next to the records (<records>.<workload>.curve.csv), and
# LOOM_GPU_BENCH_FLAGS (split on spaces) adds flags to its own, e.g. --benchmark_min_time=0.1.
# LOOM_GPU_ARCH (e.g. sm_90a) compiles gpu_check's and bench_gpu's programs for that
# architecture rather than the device's: sm_90a adds warpgroup MMAs (wgmma) on an H100 or H200.
# Step torch times the same workloads with PyTorch (benchmarks/gpu/torch_baseline.py: cuBLASLt,
# cuDNN's graph API with cudnn.benchmark), the contender a user would pick instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ ${1:-} == pack ]]; then
  mkdir -p "$root/.deps/include"
  for d in nlohmann doctest; do
    cp -r "/usr/include/$d" "$root/.deps/include/"
  done
  echo "header-only dependencies copied to $root/.deps/include"
  # Debian's Google Benchmark as an install tree (its CMake package finds the library relative
  # to itself).
  lib=/usr/lib/x86_64-linux-gnu
  if [[ -d $lib/cmake/benchmark ]]; then
    bench=$root/.deps/benchmark
    mkdir -p "$bench/include" "$bench/lib/x86_64-linux-gnu/cmake"
    cp -r /usr/include/benchmark "$bench/include/"
    cp -a "$lib"/libbenchmark.so* "$lib"/libbenchmark_main.a "$bench/lib/x86_64-linux-gnu/"
    cp -r "$lib/cmake/benchmark" "$bench/lib/x86_64-linux-gnu/cmake/"
    echo "Google Benchmark copied to $bench"
  fi
  exit 0
fi

build=${1:-$root/build-gpu}
bench_pkg=()
packed=$root/.deps/benchmark/lib/x86_64-linux-gnu
if [[ -d $packed/cmake/benchmark ]]; then
  bench_pkg=(-Dbenchmark_DIR="$packed/cmake/benchmark")
  export LD_LIBRARY_PATH=$packed${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_ENABLE_LLVM=OFF \
  -DLOOM_ENABLE_EIGEN=OFF -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_BENCHMARKS_CHECK_ONLY=OFF \
  -DLOOM_HEADERS_DIR="$root/.deps/include" \
  "${bench_pkg[@]}"
targets=(loom_tests_cuda_nvrtc loom_tests_cuda_device loom_tests_cuda_measure loom_fake_libcuda
         gpu_check)
# (The target list goes through a variable: under pipefail, grep -q closing the pipe early makes
# the pipeline fail.)
build_targets=$(cmake --build "$build" --target help 2>/dev/null || true)
if [[ $build_targets == *bench_gpu* ]]; then
  targets+=(bench_gpu)
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
# Every step runs even when an earlier one failed; the exit status says whether any did.
status=0
steps=${LOOM_GPU_STEPS:-ctest check bench torch}
if [[ $steps == *ctest* ]]; then
  ctest --test-dir "$build" -L "${LOOM_GPU_CTEST_LABELS:-cuda|gpu}" --output-on-failure || status=1
fi
if [[ $steps == *check* ]]; then
  GPU_CHECK_ARCH=${LOOM_GPU_ARCH:-} "$build/benchmarks/gpu_check" "${LOOM_GPU_CHECK_PER_OP:-50}" ||
    status=1
fi
if [[ $steps == *bench* && -x $build/benchmarks/bench_gpu ]]; then
  "$build/benchmarks/bench_gpu" --trials="${LOOM_GPU_TRIALS:-800}" \
    --records="${LOOM_GPU_RECORDS:-$build/gpu_tuned.jsonl}" \
    ${LOOM_GPU_WORKLOADS:+--workloads="$LOOM_GPU_WORKLOADS"} ${LOOM_GPU_ARCH:+--arch="$LOOM_GPU_ARCH"} \
    --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
    --benchmark_report_aggregates_only=true ${LOOM_GPU_BENCH_FLAGS:-} || status=1
fi
if [[ $steps == *torch* ]]; then
  python3 "$root/benchmarks/gpu/torch_baseline.py" \
    ${LOOM_GPU_WORKLOADS:+--workloads="$LOOM_GPU_WORKLOADS"} || status=1
fi
exit $status
