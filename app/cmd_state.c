/* cmd_state.c: `remat state`: the persistent bytes (weights, gradients,
 * optimizer state) of a number of parameters on one rank, from the
 * library's one table of them (remat_state_bytes), as one JSON line. The
 * Python profiler asks this command for the state bytes it writes into a
 * problem file, so that both sides count them alike. */
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "remat.h"

static const char *usage_text =
    "usage: remat state --params N [options]\n"
    "\n"
    "Prints the bytes of persistent state N parameters take on one rank, as the\n"
    "ZeRO paper counts them: weights, gradients, and the optimizer state, which\n"
    "holds a mixed-precision run's fp32 master weights. One JSON line:\n"
    "  {\"params\": N, ..., \"weights\": W, \"grads\": G, \"optimizer_state\": S,\n"
    "   \"bytes\": W + G + S}\n"
    "\n"
    "options:\n"
    "  --params N          the parameters (required)\n"
    "  --precision P       fp32 (4 + 4 bytes), bf16 or fp16 (2 + 2, and a 4-byte\n"
    "                      master copy); default fp32\n"
    "  --optimizer O       adamw or adam (8 bytes), sgd-momentum (4), sgd (0), none\n"
    "                      (0, and no master copy); default adamw\n"
    "  --zero Z            ZeRO stage 0-3 over --dp replicas: 1 shards the optimizer\n"
    "                      state, 2 the gradients too, 3 the weights too (default 0)\n"
    "  --dp D              data-parallel replicas (default 1)\n"
    "  --tp T              tensor-parallel degree: divides the parameters (default 1)\n"
    "  -h, --help          this help\n"
    "\n"
    "Exit status: 0 done; 2 bad usage.\n";

int remat_cmd_state(int argc, char **argv) {
  cli_name = "remat state";
  uint64_t params = UINT64_MAX; /* none given */
  int64_t dp = 1, tp = 1;
  int zero = 0;
  const char *precision = "fp32", *optimizer = "adamw";
  const cli_flag flags[] = {
      {.name = "--params", .kind = CLI_U64, .dst = &params, .lo = 0},
      {.name = "--precision", .kind = CLI_STR, .dst = &precision},
      {.name = "--optimizer", .kind = CLI_STR, .dst = &optimizer},
      /* any integer here: remat_state_bytes checks them, in its words */
      {.name = "--zero", .kind = CLI_INT, .dst = &zero, .lo = -1e9, .hi = 1e9},
      {.name = "--dp", .kind = CLI_I64, .dst = &dp, .lo = -1e18, .hi = 1e18},
      {.name = "--tp", .kind = CLI_I64, .dst = &tp, .lo = -1e18, .hi = 1e18},
      {NULL}};
  if (cli_parse_flags(argc, argv, flags, usage_text)) return CLI_EXIT_USAGE;
  if (params == UINT64_MAX)
    return cli_fail(CLI_EXIT_USAGE, "--params N is needed; see remat state --help");
  uint64_t parts[REMAT_STATE_PART_COUNT], total;
  remat_error err;
  if (remat_state_bytes(params, precision, optimizer, zero, dp, tp, parts, &total, &err))
    return cli_fail(CLI_EXIT_USAGE, "%s", err.msg);
  printf("{\"params\": %llu, \"precision\": \"%s\", \"optimizer\": \"%s\", \"zero\": %d, "
         "\"dp\": %lld, \"tp\": %lld, \"weights\": %llu, \"grads\": %llu, "
         "\"optimizer_state\": %llu, \"bytes\": %llu}\n",
         (unsigned long long)params, precision, optimizer, zero, (long long)dp, (long long)tp,
         (unsigned long long)parts[REMAT_STATE_WEIGHTS],
         (unsigned long long)parts[REMAT_STATE_GRADS],
         (unsigned long long)parts[REMAT_STATE_OPTIMIZER], (unsigned long long)total);
  return cli_stdout_ok() ? CLI_EXIT_RUN : 0;
}
