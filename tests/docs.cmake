# README's examples and those of every page of docs/: every command they show
# (a "$ " line in a fenced block) is run, and the lines quoted under it must
# be what the command prints (timings masked). One test per file: readme, and
# doc_NAME for docs/NAME.md (a page without commands passes). The docs' own
# commands are quick (seconds); a slow one is marked "not run" in its page.
# Their python3 commands (remat.plot, remat.convert, loading in PyTorch) run
# with a python3 that imports torch and matplotlib (install-deps.sh --test),
# and are listed as not run where there is none.
find_program(PYTHON3 python3)
if(PYTHON3)
  set(readme_python "")
  foreach(py /usr/bin/python3 ${PYTHON3})
    execute_process(COMMAND ${py} -c "import torch, matplotlib"
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(readme_python --python ${py})
      break()
    endif()
  endforeach()
  add_test(NAME readme
           COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/readme_check.py ${readme_python}
                   ${PROJECT_SOURCE_DIR}/README.md $<TARGET_FILE:remat_cli> ${PROJECT_SOURCE_DIR})
  set_tests_properties(readme PROPERTIES LABELS "cli" TIMEOUT 900)
  file(GLOB doc_pages CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
  foreach(page ${doc_pages})
    get_filename_component(doc ${page} NAME_WE)
    string(REPLACE "-" "_" doc ${doc})
    add_test(NAME doc_${doc}
             COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/readme_check.py --none-ok ${readme_python}
                     ${page} $<TARGET_FILE:remat_cli> ${PROJECT_SOURCE_DIR})
    set_tests_properties(doc_${doc} PROPERTIES LABELS "cli" TIMEOUT 120)
  endforeach()
else()
  message(STATUS "python3 not found: the README and docs checks are not registered")
endif()
# Every flag README and docs/ show for a command is in its --help.
add_test(NAME help COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/help.sh $<TARGET_FILE:remat_cli>
                           ${PROJECT_SOURCE_DIR})
set_tests_properties(help PROPERTIES LABELS "cli;unit" TIMEOUT 60)
