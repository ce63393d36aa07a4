# cmake -P script: build and run a downstream project against attn.
#   -DMODE=find_package      install attn from ATTN_BINARY_DIR into a temp prefix,
#                            then build tests/consumer with CMAKE_PREFIX_PATH=<prefix>
#   -DMODE=add_subdirectory  build tests/consumer/subdir, which add_subdirectory()s
#                            ATTN_SOURCE_DIR
# Other inputs: ATTN_SOURCE_DIR, ATTN_BINARY_DIR, WORK_DIR, CXX_COMPILER, GENERATOR,
# MAKE_PROGRAM, BUILD_TYPE, PREFIX_PATH ('|'-separated), CXX_FLAGS and LINKER_FLAGS (attn's own:
# a program linking a sanitizer build of attn::compiled needs the same sanitizers). Fails on any
# non-zero exit.
cmake_minimum_required(VERSION 3.25)

foreach(var MODE ATTN_SOURCE_DIR WORK_DIR CXX_COMPILER GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

# run(<step> <command>...): run a command, fail with its output if it fails.
function(run step)
  list(JOIN ARGN " " cmd)
  message(STATUS "[consumer ${MODE}] ${step}: ${cmd}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[consumer ${MODE}] ${step} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(build_dir "${WORK_DIR}/build")
string(REPLACE "|" ";" prefix_path "${PREFIX_PATH}")
set(configure_args -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
  set(config_args --config "${BUILD_TYPE}")
endif()

# CMAKE_PREFIX_PATH goes through an initial-cache file (-C) so that a list with
# ';' needs no escaping on a command line.
set(init_cache "${WORK_DIR}/init.cmake")
list(APPEND configure_args -C "${init_cache}")
# The build type's own flags (Release: -O3) are replaced by -O0: the consumer checks the package,
# not speed, and unoptimised it builds in about half the time.
macro(write_init_cache)
  set(_build_type_flags "")
  if(BUILD_TYPE)
    string(TOUPPER "${BUILD_TYPE}" _bt)
    set(_build_type_flags "set(CMAKE_CXX_FLAGS_${_bt} [==[-O0]==] CACHE STRING \"\")\n")
  endif()
  file(WRITE "${init_cache}"
       "set(CMAKE_PREFIX_PATH [==[${prefix_path}]==] CACHE STRING \"\")\n"
       "set(CMAKE_CXX_FLAGS [==[${CXX_FLAGS}]==] CACHE STRING \"\")\n"
       "set(CMAKE_EXE_LINKER_FLAGS [==[${LINKER_FLAGS}]==] CACHE STRING \"\")\n"
       "${_build_type_flags}")
endmacro()

if(MODE STREQUAL "find_package")
  if(NOT ATTN_BINARY_DIR)
    message(FATAL_ERROR "run_consumer.cmake: -DATTN_BINARY_DIR=... is required")
  endif()
  set(prefix "${WORK_DIR}/prefix")
  run("install" "${CMAKE_COMMAND}" --install "${ATTN_BINARY_DIR}" --prefix "${prefix}" ${config_args})
  list(PREPEND prefix_path "${prefix}")
  write_init_cache()
  run("configure" "${CMAKE_COMMAND}" -S "${ATTN_SOURCE_DIR}/tests/consumer" -B "${build_dir}"
      ${configure_args} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
elseif(MODE STREQUAL "add_subdirectory")
  write_init_cache()
  run("configure" "${CMAKE_COMMAND}" -S "${ATTN_SOURCE_DIR}/tests/consumer/subdir" -B "${build_dir}"
      ${configure_args} "-DATTN_SOURCE_DIR=${ATTN_SOURCE_DIR}")
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown MODE '${MODE}'")
endif()

run("build" "${CMAKE_COMMAND}" --build "${build_dir}" ${config_args})

# Single-config generators put the binary in the build dir, multi-config in <config>/. The
# header-only program always; the one linking attn::compiled whenever attn was built with it.
foreach(program consumer consumer_compiled)
  set(exe "${build_dir}/${program}${CMAKE_EXECUTABLE_SUFFIX}")
  if(NOT EXISTS "${exe}" AND BUILD_TYPE)
    set(exe "${build_dir}/${BUILD_TYPE}/${program}${CMAKE_EXECUTABLE_SUFFIX}")
  endif()
  if(program STREQUAL "consumer" OR EXISTS "${exe}")
    run("run ${program}" "${exe}")
  elseif(EXPECT_COMPILED)
    message(FATAL_ERROR "[consumer ${MODE}] attn was built with attn::compiled, but ${program} was not built")
  endif()
endforeach()

# The trainer on attn/train: a run interrupted by SIGINT (exit 130, saved) and resumed ends with the
# bits of one that ran through; a new run in the interrupted run's directory is refused (exit 2)
# and leaves it as it was.
set(trainer "${build_dir}/consumer_trainer${CMAKE_EXECUTABLE_SUFFIX}")
if(NOT EXISTS "${trainer}" AND BUILD_TYPE)
  set(trainer "${build_dir}/${BUILD_TYPE}/consumer_trainer${CMAKE_EXECUTABLE_SUFFIX}")
endif()
set(runs "${WORK_DIR}/trainer_runs")
file(REMOVE_RECURSE "${runs}")
# trainer_step(<name> <expected exit status> <output variable> <arguments>...)
function(trainer_step name expected out_var)
  execute_process(COMMAND "${trainer}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${expected}")
    message(FATAL_ERROR "[consumer ${MODE}] trainer ${name}: exit ${rc}, expected ${expected}:\n"
                        "${out}${err}")
  endif()
  message(STATUS "[consumer ${MODE}] trainer ${name}: exit ${rc}: ${out}${err}")
  set(${out_var} "${out}${err}" PARENT_SCOPE)
endfunction()
trainer_step("whole run" 0 whole --out "${runs}/whole")
trainer_step("interrupted at step 24" 130 cut --out "${runs}/cut" --interrupt-at 24)
if(NOT cut MATCHES "stopped at step 25 of 60; continue with `trainer --resume --out ")
  message(FATAL_ERROR "[consumer ${MODE}] trainer: the interrupted run does not say how to "
                      "continue: ${cut}")
endif()
trainer_step("new run over it" 2 refused --out "${runs}/cut")
if(NOT refused MATCHES "an earlier run's files are in the way")
  message(FATAL_ERROR "[consumer ${MODE}] trainer: the refusal does not say why: ${refused}")
endif()
trainer_step("resumed" 0 resumed --out "${runs}/cut" --resume)
if(NOT resumed STREQUAL whole)
  message(FATAL_ERROR "[consumer ${MODE}] trainer: the resumed run ends with\n${resumed}"
                      "but the whole run with\n${whole}")
endif()
trainer_step("resumed when finished" 0 finished --out "${runs}/cut" --resume)
if(NOT finished MATCHES "is a finished run \\(step 60 of 60\\): nothing to do, nothing changed")
  message(FATAL_ERROR "[consumer ${MODE}] trainer: a finished run resumed says ${finished}")
endif()
