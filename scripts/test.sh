#!/usr/bin/env bash
# Builds loom and runs its whole test suite except GPU tests: installs the Debian packages,
# configures `build/` (Release, tests + examples + benchmarks, so everything is at least
# compiled), builds everything and runs `ctest -LE gpu`. The exit code is ctest's.
#
# Environment: BUILD_DIR (default build), JOBS (default nproc), CTEST_ARGS (extra ctest arguments).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

./scripts/install-deps.sh

start=$(date +%s)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
  -DLOOM_BUILD_TESTS=ON -DLOOM_BUILD_EXAMPLES=ON -DLOOM_BUILD_BENCHMARKS=ON
cmake --build "$build_dir" -j"$jobs"
echo "test.sh: configure + build took $(( $(date +%s) - start )) s"

status=0
# shellcheck disable=SC2086  # CTEST_ARGS is a list of words
ctest --test-dir "$build_dir" --output-on-failure -LE gpu -j"$jobs" ${CTEST_ARGS:-} || status=$?
echo "test.sh: total $(( $(date +%s) - start )) s, ctest exit code $status"
exit "$status"
