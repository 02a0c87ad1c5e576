# Optional dependencies of loom, each behind its own INTERFACE target (STYLE 3.11):
#   loom::llvm  - LOOM_WITH_LLVM=1, LLVM 19 (ORC JIT) include dirs and library
#   loom::eigen - LOOM_WITH_EIGEN=1, Eigen3::Eigen
# Used both by the source tree and by the installed loomConfig.cmake.

if(NOT DEFINED LOOM_ENABLE_LLVM)
  set(LOOM_ENABLE_LLVM AUTO)
endif()
if(NOT DEFINED LOOM_ENABLE_EIGEN)
  set(LOOM_ENABLE_EIGEN AUTO)
endif()

if(NOT TARGET loom::llvm AND NOT LOOM_ENABLE_LLVM STREQUAL "OFF")
  # LLVM 14 is preinstalled on Debian bookworm; loom needs 19 (llvm-19-dev).
  # LLVM's version file only accepts an exact major.minor, so look in llvm-19's folder first and
  # check the major version ourselves.
  find_package(LLVM CONFIG QUIET PATHS /usr/lib/llvm-19/lib/cmake/llvm NO_DEFAULT_PATH)
  if(NOT LLVM_FOUND)
    find_package(LLVM CONFIG QUIET)
  endif()
  if(LLVM_FOUND AND NOT LLVM_VERSION_MAJOR EQUAL 19)
    message(STATUS "loom: found LLVM ${LLVM_PACKAGE_VERSION}, but loom needs LLVM 19")
    set(LLVM_FOUND FALSE)
  endif()
  if(LLVM_FOUND)
    add_library(loom_llvm INTERFACE)
    add_library(loom::llvm ALIAS loom_llvm)
    target_compile_definitions(loom_llvm INTERFACE LOOM_WITH_LLVM=1)
    target_include_directories(loom_llvm SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
    if(TARGET LLVM)
      target_link_libraries(loom_llvm INTERFACE LLVM)
    else()
      llvm_map_components_to_libnames(LOOM_LLVM_LIBS orcjit core support native passes)
      target_link_libraries(loom_llvm INTERFACE ${LOOM_LLVM_LIBS})
    endif()
    message(STATUS "loom: LLVM ${LLVM_PACKAGE_VERSION} found, loom::llvm available")
  elseif(LOOM_ENABLE_LLVM STREQUAL "ON")
    message(FATAL_ERROR "loom: LOOM_ENABLE_LLVM=ON but LLVM 19 was not found (apt install llvm-19-dev)")
  else()
    message(STATUS "loom: LLVM 19 not found, the CPU JIT backend is disabled")
  endif()
endif()

if(NOT TARGET loom::eigen AND NOT LOOM_ENABLE_EIGEN STREQUAL "OFF")
  find_package(Eigen3 3.4 QUIET NO_MODULE)
  if(Eigen3_FOUND)
    add_library(loom_eigen INTERFACE)
    add_library(loom::eigen ALIAS loom_eigen)
    target_compile_definitions(loom_eigen INTERFACE LOOM_WITH_EIGEN=1)
    target_link_libraries(loom_eigen INTERFACE Eigen3::Eigen)
  elseif(LOOM_ENABLE_EIGEN STREQUAL "ON")
    message(FATAL_ERROR "loom: LOOM_ENABLE_EIGEN=ON but Eigen 3.4 was not found (apt install libeigen3-dev)")
  endif()
endif()
