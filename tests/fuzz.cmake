# The fuzz targets of tests/fuzz replayed over their corpora (seeds and the
# inputs that once crashed) as ordinary unit tests, so every build checks
# them, the sanitizer build included; scripts/fuzz.sh does the fuzzing.
foreach(t checkpoint ckpt5 llama2c shard text plan_json ckptdir)
  set(lib remat_io)
  if(t STREQUAL "plan_json")
    set(lib remat_plan)
  endif()
  remat_test(fuzz_${t}_replay SOURCES fuzz/fuzz_${t}.c fuzz/replay.c LIBS ${lib} LABELS unit
             TIMEOUT 60 ARGS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${t})
endforeach()
