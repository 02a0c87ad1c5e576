# LOOM_SANITIZE: builds everything this project compiles (loom's compiled bodies, loom::llvm's
# front end, the tests, examples and benchmarks) with GCC's or Clang's sanitizers, for the
# sanitizer legs of scripts/test.sh. A comma-separated list passed to -fsanitize=:
#   cmake -B build-asan -DLOOM_SANITIZE=address,undefined    AddressSanitizer + UBSan
#   cmake -B build-tsan -DLOOM_SANITIZE=thread               ThreadSanitizer
# Every finding aborts the program (-fno-sanitize-recover=all), so a ctest fails on it. LLVM and
# the other prebuilt libraries are not instrumented. The libFuzzer targets of tests/fuzz add
# LOOM_FUZZ_SANITIZERS (address,undefined) to their own -fsanitize=fuzzer.
#
# LOOM_SANITIZE_TESTS names the tests of a sanitizer build (all when empty): each gets the ctest
# label `sanitize`, and the target loom_sanitize_tests builds them (loom_sanitizer_leg,
# cmake/LoomHelpers.cmake). An entry `<test>:<argument>` also passes <argument> to a doctest
# program, a filter that runs part of it (`loom_tests_jit:--source-file=*test_engine.cpp`). So a
# leg is
#   cmake -B build-tsan -DLOOM_SANITIZE=thread -DLOOM_SANITIZE_TESTS="loom_tests_threads"
#   cmake --build build-tsan --target loom_sanitize_tests && ctest --test-dir build-tsan -L sanitize
set(LOOM_SANITIZE "" CACHE STRING
    "Sanitizers for everything loom's build compiles (address,undefined or thread; empty: none)")
set(LOOM_SANITIZE_TESTS "" CACHE STRING
    "With LOOM_SANITIZE: the tests labelled sanitize and built by loom_sanitize_tests (empty: all)")
set(LOOM_FUZZ_SANITIZERS address,undefined)

if(LOOM_SANITIZE)
  string(REPLACE "," ";" _loom_sanitizers "${LOOM_SANITIZE}")
  foreach(s IN LISTS _loom_sanitizers)
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "loom: LOOM_SANITIZE=${LOOM_SANITIZE}: unknown sanitizer '${s}' "
                          "(known: address, undefined, thread, leak)")
    endif()
  endforeach()
  if("thread" IN_LIST _loom_sanitizers AND "address" IN_LIST _loom_sanitizers)
    message(FATAL_ERROR "loom: LOOM_SANITIZE=${LOOM_SANITIZE}: ThreadSanitizer and "
                        "AddressSanitizer cannot be combined")
  endif()
  add_compile_options(-fsanitize=${LOOM_SANITIZE} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${LOOM_SANITIZE})
  add_custom_target(loom_sanitize_tests)
  message(STATUS "loom: building with -fsanitize=${LOOM_SANITIZE}")
endif()
