#!/usr/bin/env bash
# Builds and runs loom's main demo (examples/00_tune_gemm.cpp): a 512^3 GEMM tuned for about a
# minute, checked, and raced against a naive loop and Eigen. Arguments go to the demo
# (--trials N, --seconds S, --records FILE). Without LLVM the demo is the quick start instead.
#
# Environment: BUILD_DIR (default build), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

./scripts/install-deps.sh --demo
# The demo needs neither the tests nor the benchmarks (nor their packages); test.sh turns them
# back on in the same build directory.
# A new build directory is configured for Ninja (as scripts/test.sh does); an existing one keeps
# its generator.
generator=()
[[ -f $build_dir/CMakeCache.txt ]] || generator=(-G Ninja)
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_EXAMPLES=ON \
  -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCHMARKS=OFF
cmake --build "$build_dir" --target loom_demo -j"$jobs"
exec "$build_dir/examples/loom_demo" "$@"
