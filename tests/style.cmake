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
  # Files that hold one concern: no source file of the library or the CLI
  # runs over 800 lines (scripts/long_files.py); the two --allow files await
  # their split and are listed, not failed.
  add_test(NAME file_length
           COMMAND ${PYTHON3} ${PROJECT_SOURCE_DIR}/scripts/long_files.py --limit 800
                   --allow src/model/gpt2.c --allow src/plan/problem.c
                   ${PROJECT_SOURCE_DIR} src app)
  set_tests_properties(file_length PROPERTIES LABELS unit TIMEOUT 60)
else()
  message(STATUS "python3 not found: the function and file length checks are not registered")
endif()
