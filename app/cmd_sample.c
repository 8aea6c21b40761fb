/* cmd_sample.c: `remat sample`: text from a GPT-2 or Llama checkpoint, a token at a
 * time with a KV cache (remat/generate.h: the model's forward on the
 * backend, its weights and cache in one planned region), decoded with
 * GPT-2's BPE or as bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "remat.h"

static const char *usage_text =
          "usage: remat sample --model FILE [options]\n"
          "\n"
          "Writes the prompt, then text the model continues it with, on standard\n"
          "output. FILE is an llm.c GPT-2 checkpoint, fp32 (version 3) or bf16\n"
          "(version 5, widened to fp32 exactly), or a llama2.c Llama (export.py's\n"
          "version 1 or run.c's legacy file), from remat train --save, llm.c or\n"
          "llama2.c.\n"
          "Each new token attends to the keys and values kept for the tokens before\n"
          "it (a KV cache); when the model's context (maxT) is full, the newest half\n"
          "of it is fed again and generation goes on. The same model, prompt,\n"
          "options and seed give the same text.\n"
          "\n"
          "Tokens: a model with a vocabulary of 256 reads and writes bytes (what\n"
          "`remat train` trains on by default); one of 50257 (padded 50304) GPT-2's BPE\n"
          "(shards from `remat tokenize`). Other vocabularies need --bytes. A BPE model\n"
          "stops at <|endoftext|> (token 50256, the end of a document), not written,\n"
          "or after --tokens, whichever comes first; --ignore-eot goes on past it.\n"
          "\n"
          "options:\n"
          "  --model FILE        the checkpoint (required)\n"
          "  --prompt TEXT       text to continue (default: a newline for byte models,\n"
          "                      <|endoftext|> for BPE models)\n"
          "  --prompt-file FILE  the prompt is FILE's bytes (instead of --prompt)\n"
          "  --tokens N          tokens to generate (default 128)\n"
          "  --temperature X     divide the logits by X before the softmax (default 1.0);\n"
          "                      0 always takes the most likely token\n"
          "  --top-k K           draw among the K most likely tokens (default 0: all)\n"
          "  --top-p P           nucleus sampling: draw among the fewest most likely tokens\n"
          "                      whose probabilities sum to at least P, in (0, 1], after\n"
          "                      --temperature and --top-k (default 1: all)\n"
          "  --seed N            the draws' seed (default 1337)\n"
          "  --vocab DIR         directory holding encoder.json and vocab.bpe for BPE models\n"
          "                      (default $REMAT_VOCAB, else share/remat/gpt2-vocab beside\n"
          "                      an installed remat, else third_party/gpt2-vocab of remat's\n"
          "                      source tree, where scripts/fetch-vocab.sh puts them)\n"
          "  --bytes             tokens are bytes whatever the vocabulary (ids from 256 on\n"
          "                      are written as U+FFFD)\n"
          "  --ignore-eot        a BPE model goes on past <|endoftext|>, writing it as that\n"
          "                      text, until --tokens\n"
          "  --threads N         threads for the matrix products (default 1: a token at a\n"
          "                      time reads every weight once and is bound by memory, not\n"
          "                      arithmetic; 0 one per CPU)\n"
          "  --backend NAME      the backend the model runs on (cpu; remat --version lists\n"
          "                      those built)\n"
          "  -h, --help          this help\n"
          "\n"
          "Exit status: 0 done; 1 the model, vocabulary or prompt file could not be\n"
          "read; 2 bad usage.\n";


typedef struct {
  const char *model, *prompt, *prompt_file, *vocab;
  int64_t tokens, top_k, seed, threads;
  double temperature, top_p;
  int bytes, ignore_eot;
} opts;

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.tokens = 128, .temperature = 1.0, .top_p = 1.0, .seed = 1337, .threads = 1};
  const cli_flag flags[] = {
      {.name = "--model", .kind = CLI_STR, .dst = &o->model},
      {.name = "--prompt", .kind = CLI_RAW, .dst = &o->prompt},
      {.name = "--prompt-file", .kind = CLI_STR, .dst = &o->prompt_file},
      {.name = "--vocab", .kind = CLI_STR, .dst = &o->vocab},
      {.name = "--tokens", .kind = CLI_I64, .dst = &o->tokens, .lo = 0, .hi = 1 << 24},
      {.name = "--top-k", .kind = CLI_I64, .dst = &o->top_k, .lo = 0, .hi = 1 << 30},
      {.name = "--seed", .kind = CLI_I64, .dst = &o->seed, .lo = 0, .hi = 9e18},
      {.name = "--threads", .kind = CLI_I64, .dst = &o->threads, .lo = 0, .hi = 1024},
      {.name = "--temperature", .kind = CLI_F64, .dst = &o->temperature, .lo = 0, .hi = 100},
      {.name = "--top-p", .kind = CLI_F64, .dst = &o->top_p, .lo = 0, .hi = 1},
      {.name = "--bytes", .kind = CLI_SWITCH, .dst = &o->bytes},
      {.name = "--ignore-eot", .kind = CLI_SWITCH, .dst = &o->ignore_eot},
      {NULL}};
  if (cli_parse_flags(argc, argv, flags, usage_text)) return -1;
  if (!o->model)
    return cli_fail(-1, "--model FILE is needed: a checkpoint from remat train --save");
  if (o->top_p <= 0)
    return cli_fail(-1, "--top-p 0 keeps no token: give P in (0, 1] (1 keeps them all; "
                        "--temperature 0 takes the most likely)");
  if (o->prompt && o->prompt_file)
    return cli_fail(-1, "--prompt and --prompt-file both give the prompt: choose one");
  return 0;
}

/* The prompt's text (--prompt, --prompt-file's bytes, or none: *text "")
 * and its tokens; a prompt without text is a newline (bytes) or
 * <|endoftext|> (BPE). *buf holds a file's bytes, for the caller to free. */
static int make_prompt(const opts *o, remat_bpe *bpe, const char **text, size_t *len, char **buf,
                       remat_ids *prompt) {
  remat_error err;
  *buf = NULL;
  *text = o->prompt ? o->prompt : "";
  *len = strlen(*text);
  if (o->prompt_file) {
    if (cli_read_file(o->prompt_file, buf, len)) return 1;
    *text = *buf;
  }
  int rc = 0;
  if (!bpe) {
    for (size_t i = 0; i < *len && !rc; i++)
      rc = remat_ids_push(prompt, (unsigned char)(*text)[i], &err);
    if (!*len && !rc) rc = remat_ids_push(prompt, '\n', &err);
  } else {
    rc = remat_bpe_encode(bpe, *text, *len, prompt, &err);
    if (!*len && !rc) rc = remat_ids_push(prompt, REMAT_BPE_EOT, &err);
  }
  if (rc) return cli_fail(1, "the prompt: %s", err.msg);
  return 0;
}

typedef struct {
  const remat_bpe *bpe; /* NULL: bytes */
  int stop_at_eot;      /* a BPE model's <|endoftext|> ends the text, unwritten */
  int failed;
} writer;

static int put_token(void *ctx, int32_t tok) {
  writer *w = ctx;
  if (w->bpe && w->stop_at_eot && tok == REMAT_BPE_EOT) return 1;
  if (!w->bpe) {
    if (tok < 256) putchar(tok);
    else fputs("\xef\xbf\xbd", stdout);
  } else {
    size_t len;
    const char *p = remat_bpe_token(w->bpe, tok, &len);
    if (p) fwrite(p, 1, len, stdout);
    else fputs("\xef\xbf\xbd", stdout); /* a padded row past the vocabulary: never drawn */
  }
  fflush(stdout);
  w->failed = ferror(stdout);
  return w->failed;
}

int remat_cmd_sample(int argc, char **argv) {
  cli_name = "remat sample";
  opts o;
  if (parse(argc, argv, &o)) return CLI_EXIT_USAGE;

  remat_set_threads((int)o.threads);
  remat_error err;
  remat_checkpoint_reader rd;
  remat_config cfg;
  if (remat_checkpoint_reader_open(&rd, o.model, &cfg, &err)) return cli_fail(1, "%s", err.msg);
  int bytes = o.bytes || cfg.vocab_size == 256;
  if (!bytes && cfg.vocab_size != REMAT_BPE_VOCAB) {
    remat_checkpoint_reader_free(&rd);
    return cli_fail(1, "'%s' has a vocabulary of %lld: neither bytes (256) nor GPT-2's BPE (%d); "
                    "give --bytes to read its tokens as bytes", o.model,
                    (long long)cfg.vocab_size, REMAT_BPE_VOCAB);
  }
  float *params = malloc(remat_param_count(&cfg) * sizeof *params);
  if (!params) {
    remat_checkpoint_reader_free(&rd);
    return cli_fail(1, "out of memory for the weights of '%s'", o.model);
  }
  int rc = remat_checkpoint_read_params(&rd, &cfg, params, &err);
  remat_checkpoint_reader_free(&rd);
  remat_bpe *bpe = NULL;
  remat_ids prompt = {0};
  char *file_text = NULL;
  remat_generator *g = NULL;
  int status = 1;
  if (rc) {
    cli_fail(1, "%s", err.msg);
    goto done;
  }
  if (!bytes && remat_bpe_create(&bpe, cli_vocab_dir(o.vocab), &err)) {
    cli_fail(1, "%s", err.msg);
    goto done;
  }
  const char *text;
  size_t len;
  if (make_prompt(&o, bpe, &text, &len, &file_text, &prompt)) goto done;
  rc = remat_generator_create(&g, &cfg, params, 0, &err);
  free(params); /* the generator holds its own copy, in the backend's memory */
  params = NULL;
  if (rc) {
    cli_fail(1, "%s", err.msg);
    goto done;
  }
  if (prompt.n >= remat_generator_capacity(g))
    fprintf(stderr, "remat sample: the prompt's %lld tokens exceed the model's context of %lld; "
            "it continues the last %lld\n", (long long)prompt.n,
            (long long)remat_generator_capacity(g), (long long)remat_generator_capacity(g) - 1);
  remat_sample_opts so = {.tokens = o.tokens, .temperature = o.temperature, .top_k = o.top_k,
                          .seed = (uint64_t)o.seed, .top_p = o.top_p};
  fwrite(text, 1, len, stdout);
  writer w = {.bpe = bpe, .stop_at_eot = !o.ignore_eot, .failed = 0};
  rc = remat_generate(g, prompt.ids, prompt.n, &so, NULL, NULL, put_token, &w, &err);
  if (rc) {
    cli_fail(1, "%s", err.msg);
    goto done;
  }
  putchar('\n');
  if (cli_stdout_ok() || w.failed) goto done;
  status = 0;
done:
  remat_generator_destroy(g);
  remat_ids_free(&prompt);
  remat_bpe_destroy(bpe);
  free(file_text);
  free(params);
  return status;
}
