# The Python package (python/remat): profile a PyTorch model, plan it with the
# built `remat plan`, verify the plan per stage. Needs a python3 that imports
# torch (Debian's python3-torch: scripts/install-deps.sh --test) and makes a
# venv (python3-venv); unittest only. The tests run the package as pip
# installs it: python_install (tests/python/install.sh, a fixture the others
# require) installs python/ into a venv in the build tree, and the tests run
# with that venv's python and the built remat as REMAT_CLI.
# test_plot runs mpirun (a pipeline's log and trace) where there is one.
# Label python (not unit: they need torch, and take 15-35 s on two busy cores).
set(remat_torch_python "")
foreach(py /usr/bin/python3 python3)
  execute_process(COMMAND ${py} -c "import torch, ensurepip, setuptools, wheel"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(remat_torch_python ${py})
    break()
  endif()
endforeach()
if(remat_torch_python)
  set(remat_python_work ${CMAKE_CURRENT_BINARY_DIR}/python.tmp)
  add_test(NAME python_install
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python/install.sh ${remat_torch_python}
                   ${PROJECT_SOURCE_DIR}/python ${remat_python_work})
  set_tests_properties(python_install PROPERTIES LABELS "python" TIMEOUT 300
    FIXTURES_SETUP remat_python)
  set(remat_python_tests test_profile_bytes test_profile_edges test_plan test_verify test_exports
      test_convert)
  # remat.plot draws with Debian's python3-matplotlib (install-deps.sh --test)
  execute_process(COMMAND ${remat_torch_python} -c "import matplotlib"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    list(APPEND remat_python_tests test_plot)
  else()
    message(STATUS "python3 without matplotlib: python_test_plot (remat.plot) is not registered")
  endif()
  foreach(t ${remat_python_tests})
    add_test(NAME python_${t}
             COMMAND ${remat_python_work}/venv/bin/python ${CMAKE_CURRENT_SOURCE_DIR}/python/${t}.py)
    set_tests_properties(python_${t} PROPERTIES LABELS "python" TIMEOUT 300
      FIXTURES_REQUIRED remat_python
      ENVIRONMENT "REMAT_CLI=$<TARGET_FILE:remat_cli>;PYTHONDONTWRITEBYTECODE=1")
  endforeach()
else()
  message(STATUS "python3 with torch, venv and setuptools not found: the Python package's tests "
                 "are not registered")
endif()
