#!/usr/bin/env bash
# The long run of the search property test (tests/jit/test_search_jit.cpp): every operator of the
# operator library, programs sampled from its sketches, each lowered, JIT-compiled, run and
# compared with the reference interpreter. CI checks 30 programs per op; this run multiplies that
# count by SCALE (about 16,000 programs at the default 17, half an hour of one core).
#
# Builds only the loom_tests_search_jit target in BUILD_DIR, runs only the property test cases,
# keeps the output in BUILD_DIR/long-property-run.log and prints the number of programs checked
# and wrong.
# The exit code is the test program's (non-zero when a program computed a wrong result; its record
# is in the log).
#
# Environment: BUILD_DIR (default build-long), SCALE (default 17), JOBS (build jobs, default 1).
# Run it at low priority on a shared machine: `nice scripts/long-property-run.sh`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build-long}
scale=${SCALE:-17}
jobs=${JOBS:-1}
log="$build_dir/long-property-run.log"

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=ON \
  -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build_dir" --target loom_tests_search_jit -j"$jobs"

start=$(date +%s)
set +e
LOOM_SEARCH_PROPERTY_SCALE=$scale "$build_dir/tests/jit/loom_tests_search_jit" \
  --test-case="sampled programs of*" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}  # the test program's, not tee's
set -e

# One line per op: "search property: <op>: S sketches, N programs checked through the JIT, W wrong".
awk -v secs=$(( $(date +%s) - start )) -v scale="$scale" '
  /search property: .* programs checked through the JIT/ {
    for (i = 1; i <= NF; ++i) {
      if ($i == "programs" && $(i + 1) == "checked") checked += $(i - 1)
      if ($i == "wrong") wrong += $(i - 1)
    }
    ++ops
  }
  END {
    printf "long-property-run: scale %s, %d ops, %d programs checked, %d wrong, %d s\n",
           scale, ops, checked, wrong, secs
  }' "$log"
exit "$status"
