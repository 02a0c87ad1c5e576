#!/usr/bin/env bash
# Builds and runs loom's quick-start demo (examples/01_quickstart.cpp): a small network written
# with the DSL, its compute DAG, and its evaluation checked against plain C++ loops.
#
# Environment: BUILD_DIR (default build), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}

./scripts/install-deps.sh
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_EXAMPLES=ON
cmake --build "$build_dir" --target loom_demo -j"$jobs"
exec "$build_dir/examples/loom_demo"
