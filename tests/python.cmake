# The Python package (python/remat): profile a PyTorch model, plan it with the
# built `remat plan`, verify the plan per stage. Needs a python3 that imports
# torch (Debian's python3-torch: scripts/install-deps.sh --test); unittest only.
# Label python (not unit: they need torch, and take 15-35 s on two busy cores).
set(remat_torch_python "")
foreach(py /usr/bin/python3 python3)
  execute_process(COMMAND ${py} -c "import torch" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(remat_torch_python ${py})
    break()
  endif()
endforeach()
if(remat_torch_python)
  foreach(t test_profile_bytes test_plan test_verify test_exports)
    add_test(NAME python_${t}
             COMMAND ${remat_torch_python} ${CMAKE_CURRENT_SOURCE_DIR}/python/${t}.py)
    set_tests_properties(python_${t} PROPERTIES LABELS "python" TIMEOUT 300
      ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/python;REMAT_CLI=$<TARGET_FILE:remat_cli>;PYTHONDONTWRITEBYTECODE=1")
  endforeach()
else()
  message(STATUS "python3 with torch not found: the Python package's tests are not registered")
endif()
