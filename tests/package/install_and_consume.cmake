# package.find_package: installs loom from the current build tree into a fresh prefix, then
# configures, builds and runs the find_package consumer against that prefix only. Invoked as
#   cmake -DLOOM_BINARY_DIR=<loom build> -DCONSUMER_DIR=<consumer source> -DWORK_DIR=<scratch>
#         -DGENERATOR=<gen> -DCXX_COMPILER=<c++> -P install_and_consume.cmake
cmake_minimum_required(VERSION 3.25)

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("-- ${step}:\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${step} failed (exit ${rc})")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

run("install loom into ${prefix}" ${CMAKE_COMMAND} --install ${LOOM_BINARY_DIR} --prefix ${prefix})
foreach(file include/loom/loom.hpp include/loom/cost/pretrained/cpu.model)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "package test: ${prefix}/${file} was not installed")
  endif()
endforeach()

# CMAKE_FIND_USE_PACKAGE_REGISTRY=OFF and the prefix as the only hint: the consumer must find the
# installed copy, never the source or build tree.
run("configure the consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS ${build}/CMakeCache.txt loom_dir REGEX "^loom_DIR:")
string(FIND "${loom_dir}" "${prefix}/" pos)
if(NOT pos GREATER -1)
  message(FATAL_ERROR "package test: the consumer found loom outside the prefix: ${loom_dir}")
endif()

run("build the consumer" ${CMAKE_COMMAND} --build ${build})
run("run the consumer" ${build}/consumer)
