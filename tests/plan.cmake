# Planner tests: the exact planner against brute force and the seed example,
# and the `remat plan` command (malformed input, glpsol cross-check).
remat_test(test_plan SOURCES test_plan.c plan_brute.c LIBS remat_plan LABELS unit TIMEOUT 120)
remat_cli_test(plan_errors plan_errors.sh LABELS unit)
# needs glpsol (glpk-utils, installed by scripts/install-deps.sh --test)
remat_cli_test(plan_glpk plan_glpk.sh LABELS glpk)
