# Runs one compile_fail case (STYLE 3.12, Eigen's failtest idea). Invoked by ctest as
#   cmake -DCOMPILER=<c++> "-DFLAGS=<flag;...>" -DSOURCE=<file.cpp> [-DEXPECT=<NAME>] -P <this file>
# With EXPECT: the file is compiled with LOOM_SHOULD_FAIL_TO_BUILD; the compile must fail and its
# FIRST error must contain EXPECT (so the user sees our message, not a cascade). Then it prints
# "compile_fail verdict: <EXPECT> is the first error", which the test's PASS_REGULAR_EXPRESSION
# matches. Without EXPECT: the file must compile (the control).
cmake_minimum_required(VERSION 3.25)

if(DEFINED EXPECT)
  set(define -DLOOM_SHOULD_FAIL_TO_BUILD)
else()
  set(define)
endif()
execute_process(
  COMMAND ${COMPILER} ${FLAGS} ${define} -fsyntax-only ${SOURCE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)

if(NOT DEFINED EXPECT)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "control ${SOURCE} must compile but did not (exit ${rc}):\n${out}")
  endif()
  message("compile_fail verdict: control compiles")
  return()
endif()

if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled with LOOM_SHOULD_FAIL_TO_BUILD, but it must fail "
                      "with ${EXPECT}")
endif()
string(REGEX MATCH "error: [^\n]*" first_error "${out}")
string(REGEX MATCHALL "error: " all_errors "${out}")
list(LENGTH all_errors num_errors)
string(FIND "${first_error}" "${EXPECT}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "${SOURCE}: the first error is not ${EXPECT}:\n  ${first_error}\n"
                      "full compiler output:\n${out}")
endif()
message("${first_error}\n(${num_errors} error(s) in total)")
message("compile_fail verdict: ${EXPECT} is the first error")
