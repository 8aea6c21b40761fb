/* main.c: the remat command line: dispatches to subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "remat.h"

/* A training run chooses how its threads wait from how busy the CPUs are,
 * before OpenMP starts; one on a single thread (--threads 1) has nothing to
 * choose. libgomp reads its settings only when loaded: to change them the
 * process runs itself again (remat_threads_prepare). */
static void prepare_threads(int argc, char **argv) {
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "--plan-only")) return;
    if (!strcmp(argv[i], "--threads") && i + 1 < argc && atoi(argv[i + 1]) == 1) return;
  }
  if (remat_threads_prepare()) {
    fflush(NULL);
    execv("/proc/self/exe", argv);
    remat_threads_prepare_failed();
  }
}

int remat_cmd_train(int argc, char **argv);
int remat_cmd_plan(int argc, char **argv);
int remat_cmd_tokenize(int argc, char **argv);
int remat_cmd_sample(int argc, char **argv);

static void usage(FILE *f) {
  fprintf(f,
          "usage: remat <command> [options]\n"
          "\n"
          "commands:\n"
          "  train     train GPT-2 under a memory budget with per-layer activation checkpointing\n"
          "  plan      plan pipeline stages: layers and checkpointed layers per stage\n"
          "  tokenize  text to llm.c token shards with GPT-2's BPE (and --decode back)\n"
          "  sample    text from a trained model (KV cache; temperature, top-k, seed)\n"
          "\n"
          "Run 'remat <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  /* a file size limit makes a save fail with a message, not kill us */
  remat_ignore_sigxfsz();
  const char *cmd = argv[1];
  if (strcmp(cmd, "train") == 0) {
    prepare_threads(argc, argv);
    return remat_cmd_train(argc - 1, argv + 1);
  }
  if (strcmp(cmd, "plan") == 0) return remat_cmd_plan(argc - 1, argv + 1);
  if (strcmp(cmd, "tokenize") == 0) return remat_cmd_tokenize(argc - 1, argv + 1);
  if (strcmp(cmd, "sample") == 0) return remat_cmd_sample(argc - 1, argv + 1);
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
