# The installed library: `cmake --install` of this build into a fresh
# prefix, examples/ built against it with find_package(remat) and with
# pkg-config, and run (tests/install.sh). Not under the sanitizers: a
# program outside would need their runtime to link the library.
if(NOT REMAT_SANITIZE)
  add_test(NAME install
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install.sh ${PROJECT_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/install.tmp
                   ${CMAKE_C_COMPILER})
  set_tests_properties(install PROPERTIES LABELS install TIMEOUT 120)
endif()
