# Runs tests/mpi/test_mpi_tune's three phases under MPIEXEC with three ranks:
#   cmake -DMPIEXEC=mpirun -DMPIEXEC_FLAGS=--oversubscribe -DTEST=test_mpi_tune -DWORK_DIR=dir -P this
# tune and resume must pass; kill must end the job with a failure (its search rank kills itself).
file(MAKE_DIRECTORY "${WORK_DIR}")
separate_arguments(_flags UNIX_COMMAND "${MPIEXEC_FLAGS}")
foreach(phase tune kill resume)
  string(TIMESTAMP _start "%s")
  execute_process(COMMAND ${MPIEXEC} ${_flags} -np 3 ${TEST} ${phase} ${WORK_DIR}
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  string(TIMESTAMP _end "%s")
  math(EXPR _seconds "${_end} - ${_start}")
  message("--- ${phase} (exit ${_rc}, ${_seconds} s)\n${_out}")
  if(phase STREQUAL "kill")
    if(_rc EQUAL 0)
      message(FATAL_ERROR "kill: the job should have ended with its search rank killed\n${_err}")
    endif()
  elseif(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${phase} failed:\n${_err}")
  endif()
endforeach()
