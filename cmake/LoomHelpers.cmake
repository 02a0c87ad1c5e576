# Helpers for loom's own tests and benchmarks (STYLE 3.11).

# loom_link_compiled(<target> <libs...>)
# Links loom's bodies compiled once (cmake/LoomCompiled.cmake): loom_compiled_mpi when <libs>
# has loom::mpi, loom_compiled_llvm when it has loom::llvm, loom_compiled otherwise.
function(loom_link_compiled target)
  if("loom::mpi" IN_LIST ARGN)
    target_link_libraries(${target} PRIVATE loom_compiled_mpi)
  elseif("loom::llvm" IN_LIST ARGN)
    target_link_libraries(${target} PRIVATE loom_compiled_llvm)
  else()
    target_link_libraries(${target} PRIVATE loom_compiled)
  endif()
endfunction()

# _loom_sanitizer_entry(<test> <in-var> <args-var>)
# Whether this is a sanitizer build (LOOM_SANITIZE, cmake/LoomSanitize.cmake) that runs <test>:
# LOOM_SANITIZE_TESTS is empty (every test) or has an entry `<test>` or `<test>:<argument>`; the
# arguments of the latter (doctest filters) go to <args-var>.
function(_loom_sanitizer_entry test in_var args_var)
  set(in FALSE)
  set(args "")
  if(LOOM_SANITIZE)
    if(NOT LOOM_SANITIZE_TESTS)
      set(in TRUE)
    endif()
    foreach(entry IN LISTS LOOM_SANITIZE_TESTS)
      string(FIND "${entry}" ":" colon)
      if(colon EQUAL -1)
        set(name "${entry}")
      else()
        string(SUBSTRING "${entry}" 0 ${colon} name)
        math(EXPR colon "${colon} + 1")
        string(SUBSTRING "${entry}" ${colon} -1 arg)
      endif()
      if(name STREQUAL test)
        set(in TRUE)
        if(NOT colon EQUAL -1)
          list(APPEND args "${arg}")
        endif()
      endif()
    endforeach()
  endif()
  set(${in_var} ${in} PARENT_SCOPE)
  set(${args_var} "${args}" PARENT_SCOPE)
endfunction()

# loom_sanitizer_leg(<test>)
# In a sanitizer build, a test that LOOM_SANITIZE_TESTS names gets the ctest label `sanitize` and
# is built by the target loom_sanitize_tests; <test> is also the name of its executable.
function(loom_sanitizer_leg test)
  _loom_sanitizer_entry(${test} in args)
  if(in)
    set_property(TEST ${test} APPEND PROPERTY LABELS sanitize)
    add_dependencies(loom_sanitize_tests ${test})
  endif()
endfunction()

# loom_add_test(<name> SOURCES <files...> [LIBS <targets...>] [LABELS <labels...>]
#               [OWN_MAIN] [SKIP_RETURN_CODE <code>] [COST <seconds>])
# One doctest executable per layer, sharing the doctest main (loom_test_main) and registered with
# ctest under <name>.
# - OWN_MAIN: the sources define main() (say, one that first checks for the hardware the tests
#   need) and run doctest themselves; the executable links doctest instead of loom_test_main.
# - SKIP_RETURN_CODE: ctest reports the test as skipped, not failed, when it exits with <code>.
# - COST: about how many seconds the test runs (CI's 2 cores, all tests running): ctest starts
#   the costliest tests first, so that no long one is left running alone at the end of a fresh
#   build's run (which has no timings of earlier runs to order by).
function(loom_add_test name)
  cmake_parse_arguments(ARG "OWN_MAIN" "SKIP_RETURN_CODE;COST" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  if(ARG_OWN_MAIN)
    target_link_libraries(${name} PRIVATE doctest::doctest loom::loom ${ARG_LIBS})
  else()
    target_link_libraries(${name} PRIVATE loom_test_main ${ARG_LIBS})
  endif()
  loom_link_compiled(${name} ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  # -O1 after the build type's flags (-O0 in a sanitizer build): a test file is mostly doctest
  # cases and the templates they instantiate, and the work they test runs in loom_compiled, built
  # with the build type's flags. A test file that took 19 s to compile at -O3 takes 11 s at -O1;
  # one that took 64 s under ASan + UBSan at -O1 takes 27 s at -O0.
  if(LOOM_SANITIZE)
    target_compile_options(${name} PRIVATE -Wall -Wextra -Werror=switch -O0)
  else()
    target_compile_options(${name} PRIVATE -Wall -Wextra -Werror=switch -O1)
  endif()
  target_compile_definitions(${name} PRIVATE LOOM_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests")
  # In a sanitizer build, the doctest filters LOOM_SANITIZE_TESTS gives the test, if any.
  _loom_sanitizer_entry(${name} in sanitizer_args)
  add_test(NAME ${name} COMMAND ${name} ${sanitizer_args})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if(DEFINED ARG_COST)
    set_tests_properties(${name} PROPERTIES COST ${ARG_COST})
  endif()
  if(DEFINED ARG_SKIP_RETURN_CODE)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE ${ARG_SKIP_RETURN_CODE})
  endif()
  loom_sanitizer_leg(${name})
endfunction()

# loom_compile_check_only(<target>)
# The target's files are compiled by the front end only (cmake/syntax_only.sh, -fsyntax-only):
# a check that they compile, with empty objects that nothing may link.
function(loom_compile_check_only target)
  set_target_properties(${target} PROPERTIES CXX_COMPILER_LAUNCHER
                                             ${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh)
endfunction()

# loom_add_benchmark(<name> SOURCES <files...> [LIBS <targets...>])
# Google Benchmark program built with -O3 -DNDEBUG; benchmarks are built in CI, never run there.
# With LOOM_BENCHMARKS_CHECK_ONLY (scripts/test.sh sets it in a new build directory) <name> is
# instead an object library compiled by the front end only (cmake/syntax_only.sh): CI checks that
# every benchmark compiles, in about a third of the time, and makes no binary that could be timed
# by mistake. The target takes target_* calls either way.
function(loom_add_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  if(LOOM_BENCHMARKS_CHECK_ONLY)
    add_library(${name} OBJECT ${ARG_SOURCES})
    loom_compile_check_only(${name})
  else()
    add_executable(${name} ${ARG_SOURCES})
  endif()
  target_link_libraries(${name} PRIVATE benchmark::benchmark ${ARG_LIBS})
  loom_link_compiled(${name} ${ARG_LIBS})
  target_compile_options(${name} PRIVATE -O3 -DNDEBUG)
endfunction()
