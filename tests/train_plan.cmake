# One answer to one question: remat train --mem chooses what remat plan
# plans for one stage, --plan-only states its slowdown as remat plan's
# objective does, both say how they number blocks, budgets echo in bytes.
remat_cli_test(plan_only plan_only.sh LABELS unit)
