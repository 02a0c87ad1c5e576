#!/usr/bin/env bash
# Regenerates the cost-model data set tests/data/cost/measurements.tsv.gz (issue 5): builds
# benchmarks/cost/make_cost_dataset.cpp and runs it. Every workload of
# benchmarks/cost/cost_workloads.hpp gets 500 distinct random programs (fixed seeds; half with
# non-divisible tiles), each JIT-compiled, checked and timed on one thread.
#
# Takes about 20 minutes (3,000 programs; JIT compilation dominates at 0.15-0.55 s per program:
# the checked-in file took 21 minutes as one process on a 2-core AMD EPYC VM). Run it on a quiet
# machine, as one process: the timings are the labels. Each program's time is normalized by a
# reference kernel timed beside it (see make_cost_dataset.cpp), which takes out most of this
# machine's drift, not the interference of a second busy core. Each program is built and run in a
# forked child, so an LLVM fatal error only fails that program. The output differs from run to
# run only by timing noise (the programs are the same for a given loom version and host vector
# width).
# Afterwards, bench_cost_model evaluates the cost models on it.
#
# Environment: BUILD_DIR (default build-cost-dataset), JOBS (default nproc), PROGRAMS (per
# workload, default 500).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build-cost-dataset}
jobs=${JOBS:-$(nproc)}
programs=${PROGRAMS:-500}
out=tests/data/cost/measurements.tsv.gz

./scripts/install-deps.sh
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=OFF \
  -DLOOM_BUILD_BENCHMARKS=ON -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_BENCHMARKS_CHECK_ONLY=OFF
cmake --build "$build_dir" --target make_cost_dataset bench_cost_model -j"$jobs"
mkdir -p "$(dirname "$out")"
# Written to a temporary file first, so that an interrupted run leaves the old data set intact.
"$build_dir/benchmarks/make_cost_dataset" "$out.tmp" --programs "$programs"
mv "$out.tmp" "$out"
ls -l "$out"
echo "evaluate with: $build_dir/benchmarks/bench_cost_model $out"
