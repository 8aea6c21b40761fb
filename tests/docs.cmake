# README's examples: every command README shows is run, and the lines it
# quotes must be what the command prints (timings masked).
find_program(PYTHON3 python3)
if(PYTHON3)
  add_test(NAME readme
           COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/readme_check.py
                   ${PROJECT_SOURCE_DIR}/README.md $<TARGET_FILE:remat_cli> ${PROJECT_SOURCE_DIR})
  set_tests_properties(readme PROPERTIES LABELS "cli" TIMEOUT 900)
else()
  message(STATUS "python3 not found: the README check is not registered")
endif()
# Every flag README and docs/ show for a command is in its --help.
add_test(NAME help COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/help.sh $<TARGET_FILE:remat_cli>
                           ${PROJECT_SOURCE_DIR})
set_tests_properties(help PROPERTIES LABELS "cli;unit" TIMEOUT 60)
