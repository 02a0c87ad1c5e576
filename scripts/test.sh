#!/usr/bin/env bash
# Builds loom and runs its whole test suite except GPU tests (installing the Debian packages
# first), in three legs, each in a build directory of its own; the exit code is non-zero when
# any leg fails.
#
# 1. normal (BUILD_DIR): a Release build of tests and examples, the benchmarks compiled as a
#    check (LOOM_BENCHMARKS_CHECK_ONLY, in a new build directory), then `ctest -LE gpu`.
# 2. asan (BUILD_DIR-asan): AddressSanitizer + UndefinedBehaviorSanitizer
#    (-DLOOM_SANITIZE=address,undefined, cmake/LoomSanitize.cmake; -O1, assertions on) over
#    ASAN_TESTS below: the unit tests of the IR, DSL, DAG, ops, net, lowering (interpreter, GPU
#    lowering), sched and cost layers, the fuzz corpora, the threads test, and the JIT's
#    loom_tests_jit (LLVM itself is not instrumented; loom's code generator and runtime are).
#    The test files are compiled at -O0 there, loom's own code at -O1 (cmake/LoomHelpers.cmake).
#    Left out to keep all three legs in CI's 25 minutes on 2 cores (UBSan doubles compile times):
#    loom_tests_search_jit (1,500 LLVM compilations of sampled programs, 4 minutes under ASan),
#    loom_tests_search (10 files to build; the search runs under ASan in
#    loom_tests_threads, through tuned_kernel's model-only fallback, and its threads under TSan;
#    left out when the MPI component joined the normal leg), loom_tests_lower_passes (11 files
#    to build), loom_tests_network (the threads test runs a
#    network), loom_tests_tune (tuning through forked measurer children), ONNX's node tests,
#    compile_fail, headers, package and the examples (they compile loom and run little of it).
# 3. tsan (BUILD_DIR-tsan): ThreadSanitizer (-DLOOM_SANITIZE=thread) over the tests of loom's
#    own threads, TSAN_TESTS below: loom_tests_threads (many threads through tuned_kernel, its
#    kernels and a compiled network; the model-only fallback runs the compile threads),
#    loom_tests_cost (the GBDT's and feature extraction's threads), and the thread tests of
#    loom_tests_jit (test_engine.cpp: the parallel runtime's pool, two threads compiling at once)
#    and loom_tests_search (test_compile_threads.cpp); the rest of those two take 6 minutes each
#    under TSan. Not loom_tests_tune (the tuner and the task scheduler): its measurer forks
#    children from a multi-threaded process and the children start threads, which TSan does not
#    support ("starting new threads after multi-threaded fork"); for the same reason
#    loom_tests_jit skips its one test of a forked child's pool under TSan.
#
# Environment: BUILD_DIR (default build), JOBS (default nproc), CTEST_ARGS (extra ctest arguments,
# every leg), LOOM_SANITIZER_LEGS (default 1; 0 runs the normal leg only, for quick local runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
sanitizer_legs=${LOOM_SANITIZER_LEGS:-1}

# Entries `<test>:<doctest filter>` run part of a test program (cmake/LoomSanitize.cmake).
ASAN_TESTS=(
  loom_tests_ir loom_tests_dsl loom_tests_dag loom_tests_ops loom_tests_net
  loom_tests_lower_interp loom_tests_lower_gpu loom_tests_sched loom_tests_cost
  loom_fuzz_records_corpus loom_fuzz_simplify_corpus loom_tests_threads
  loom_tests_jit
)
TSAN_TESTS=(
  loom_tests_threads loom_tests_cost
  "loom_tests_jit:--source-file=*test_engine.cpp"
  "loom_tests_search:--source-file=*test_compile_threads.cpp"
)

./scripts/install-deps.sh

summary=()
status=0

# run_leg <name> <build dir> <build target> <ctest arguments> -- <cmake arguments...>
run_leg() {
  local name=$1 dir=$2 target=$3 ctest_args=$4
  shift 5
  local start rc=0 built
  start=$(date +%s)
  echo "test.sh: leg $name in $dir"
  # A new build directory is configured for Ninja: it compiles a target's files while the
  # libraries that target links are still being built, where Make waits for them (with Make, a
  # sanitizer leg kept one core idle for the 200 s of loom_compiled's one file). An existing one
  # keeps the generator it has.
  local generator=()
  [[ -f $dir/CMakeCache.txt ]] || generator=(-G Ninja)
  cmake -S . -B "$dir" "${generator[@]}" "$@" && cmake --build "$dir" -j"$jobs" --target "$target" || rc=$?
  built=$(($(date +%s) - start))
  echo "test.sh: leg $name: configure + build took $built s"
  if [[ $rc -eq 0 ]]; then
    # shellcheck disable=SC2086  # both are lists of words
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" $ctest_args ${CTEST_ARGS:-} || rc=$?
  fi
  local line
  line=$(printf '%-7s %5d s (build %d s), exit code %d' "$name" $(($(date +%s) - start)) "$built" "$rc")
  echo "test.sh: leg $line"
  summary+=("$line")
  [[ $rc -eq 0 ]] || status=1
}

start=$(date +%s)
# In a new build directory the benchmarks are only compiled as a check (a third of their compile
# time, and no binary that could be timed by mistake); an existing one keeps its setting, so that
# the benchmark programs of a developer's build directory stay.
normal_new=()
[[ -f $build_dir/CMakeCache.txt ]] || normal_new=(-DLOOM_BENCHMARKS_CHECK_ONLY=ON)
run_leg normal "$build_dir" all "-LE gpu" -- -DCMAKE_BUILD_TYPE=Release \
  -DLOOM_BUILD_TESTS=ON -DLOOM_BUILD_EXAMPLES=ON -DLOOM_BUILD_BENCHMARKS=ON "${normal_new[@]}"

if [[ "$sanitizer_legs" != 0 ]]; then
  # -O1 -g1: line numbers in the reports; assertions stay on (no -DNDEBUG).
  sanitize_config=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
                   -DLOOM_BUILD_TESTS=ON -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_BUILD_BENCHMARKS=OFF)
  run_leg asan "$build_dir-asan" loom_sanitize_tests "-L sanitize" -- "${sanitize_config[@]}" \
    -DLOOM_SANITIZE=address,undefined "-DLOOM_SANITIZE_TESTS=$(IFS=';'; echo "${ASAN_TESTS[*]}")"
  # A program with TSan reports exits with code 66 when it ends, which fails its test.
  run_leg tsan "$build_dir-tsan" loom_sanitize_tests "-L sanitize" -- "${sanitize_config[@]}" \
    -DLOOM_SANITIZE=thread "-DLOOM_SANITIZE_TESTS=$(IFS=';'; echo "${TSAN_TESTS[*]}")"
fi

echo "test.sh: legs (configure + build + ctest):"
printf 'test.sh:   %s\n' "${summary[@]}"
echo "test.sh: total $(($(date +%s) - start)) s, exit code $status"
exit "$status"
