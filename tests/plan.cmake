# Planner tests: the exact planner against brute force and the seed example,
# and the `remat plan` command (malformed input, glpsol cross-check).
remat_test(test_plan SOURCES test_plan.c plan_brute.c LIBS remat_plan LABELS unit TIMEOUT 120)
remat_cli_test(plan_errors plan_errors.sh LABELS unit)
# --ranks: the layout search's JSON, table and export against the plan beside them.
remat_cli_test(ranks ranks.sh LABELS unit)
# needs glpsol (glpk-utils, installed by scripts/install-deps.sh --test)
remat_cli_test(plan_glpk plan_glpk.sh LABELS glpk)
# bench_plan --help and an unknown flag (it runs nothing in either case)
add_test(NAME bench_plan_usage
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/bench_usage.sh $<TARGET_FILE:bench_plan>)
set_tests_properties(bench_plan_usage PROPERTIES LABELS "cli;unit" TIMEOUT 30)
# the schedules' instruction streams and the simulator over them
remat_test(test_schedule SOURCES test_schedule.c LIBS remat_plan LABELS unit TIMEOUT 120)
