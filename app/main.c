/* main.c: the remat command line: dispatches to subcommands. */
#include <stdio.h>
#include <string.h>

#include "remat.h"

int remat_cmd_train(int argc, char **argv);
int remat_cmd_plan(int argc, char **argv);

static void usage(FILE *f) {
  fprintf(f,
          "usage: remat <command> [options]\n"
          "\n"
          "commands:\n"
          "  train   train GPT-2 under a memory budget with per-layer activation checkpointing\n"
          "  plan    plan pipeline stages: layers and checkpointed layers per stage\n"
          "\n"
          "Run 'remat <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "train") == 0) return remat_cmd_train(argc - 1, argv + 1);
  if (strcmp(cmd, "plan") == 0) return remat_cmd_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("remat 0.1.0\n");
    return 0;
  }
  fprintf(stderr, "remat: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return 2;
}
