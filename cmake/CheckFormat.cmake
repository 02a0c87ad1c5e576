# cmake -DLOOM_ROOT=<source dir> -DCLANG_FORMAT=<clang-format-19> -P cmake/CheckFormat.cmake
# Fails when a C++ file of the project (include/, tests/, examples/, benchmarks/; tests/data
# aside) is not laid out as .clang-format says, naming each file; `clang-format-19 -i FILE`
# fixes one.
cmake_minimum_required(VERSION 3.25)
set(files "")
foreach(dir include tests examples benchmarks)
  file(GLOB_RECURSE found "${LOOM_ROOT}/${dir}/*.hpp" "${LOOM_ROOT}/${dir}/*.ipp"
       "${LOOM_ROOT}/${dir}/*.cpp" "${LOOM_ROOT}/${dir}/*.h")
  list(APPEND files ${found})
endforeach()
list(FILTER files EXCLUDE REGEX "/tests/data/")
set(bad 0)
foreach(f IN LISTS files)
  execute_process(COMMAND "${CLANG_FORMAT}" --style=file --dry-run -Werror "${f}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    file(RELATIVE_PATH rel "${LOOM_ROOT}" "${f}")
    message(SEND_ERROR "${rel} is not clang-format clean (clang-format-19 -i ${rel})")
    math(EXPR bad "${bad} + 1")
  endif()
endforeach()
list(LENGTH files n)
if(bad GREATER 0)
  message(FATAL_ERROR "${bad} of ${n} files need clang-format")
endif()
message(STATUS "clang_format: ${n} files clean")
