# Functions that read at once: none in the library, the CLI or the benchmarks
# runs over 100 lines (scripts/long_functions.py counts from the signature
# line to the closing brace). The tests' long functions are listed, not failed.
find_program(PYTHON3 python3)
if(PYTHON3)
  add_test(NAME function_length
           COMMAND ${PYTHON3} ${PROJECT_SOURCE_DIR}/scripts/long_functions.py --limit 100
                   --report tests
                   ${PROJECT_SOURCE_DIR} src app bench)
  set_tests_properties(function_length PROPERTIES LABELS unit TIMEOUT 60)
else()
  message(STATUS "python3 not found: the function length check is not registered")
endif()
