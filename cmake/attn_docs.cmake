# Filters the headers for Doxygen (docs/doxygen_filter.py --stage), runs Doxygen on the configured
# Doxyfile, whose INPUT_FILTER reads the filtered copies, and fails when its warning log is not
# empty.
#   cmake -DPYTHON=<python3> -DFILTER=<doxygen_filter.py> -DHEADERS=<include/attn>
#         -DSTAGED=<filtered copies> -DDOXYGEN=<doxygen> -DDOXYFILE=<Doxyfile> -DLOG=<warning log>
#         -P attn_docs.cmake
file(REMOVE ${LOG})
file(REMOVE_RECURSE ${STAGED})
execute_process(COMMAND ${PYTHON} ${FILTER} --stage ${HEADERS} ${STAGED} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "attn docs: ${FILTER} --stage failed (exit status ${rc})")
endif()
execute_process(COMMAND ${DOXYGEN} ${DOXYFILE} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "attn docs: doxygen failed (exit status ${rc})")
endif()
if(EXISTS ${LOG})
  file(READ ${LOG} warnings)
  string(STRIP "${warnings}" warnings)
  if(NOT warnings STREQUAL "")
    message(FATAL_ERROR "attn docs: Doxygen warnings (${LOG}):\n${warnings}")
  endif()
endif()
get_filename_component(out ${LOG} DIRECTORY)
message(STATUS "attn docs: no warnings; ${out}/html/index.html")
