# The layering docs/architecture.md draws, checked: includes, links, the
# symbols each built library needs, and calls between files (layering.py
# says how). It reads the built static libraries, so it runs after a build.
find_program(PYTHON3 python3)
if(PYTHON3)
  add_test(NAME layering
           COMMAND ${PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/layering.py ${PROJECT_SOURCE_DIR}
                   --build ${PROJECT_BINARY_DIR})
  set_tests_properties(layering PROPERTIES LABELS unit TIMEOUT 60)
else()
  message(STATUS "python3 not found: the layering check is not registered")
endif()
