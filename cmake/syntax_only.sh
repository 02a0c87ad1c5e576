#!/usr/bin/env bash
# Compiler launcher (CXX_COMPILER_LAUNCHER) for translation units that are compiled only to check
# that they compile (loom_compile_check_only, cmake/LoomHelpers.cmake: the header checks, and the
# benchmarks with LOOM_BENCHMARKS_CHECK_ONLY): runs the compile command with -fsyntax-only, which
# skips code generation, then creates the object file empty so that the build tool finds the
# output it expects and recompiles only when a dependency (from the depfile the compiler still
# writes) changes. Nothing may link such an object.
set -euo pipefail
out=""
prev=""
for arg in "$@"; do
  [[ $prev == -o ]] && out=$arg
  prev=$arg
done
"$@" -fsyntax-only
if [[ -n $out ]]; then
  : >"$out"
fi
