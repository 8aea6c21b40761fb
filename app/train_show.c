/* train_show.c: what `remat train` shows of its plan before the first
 * step: the model and its precision, the data, each block's policy (and,
 * with --plan-only, what each policy costs), the arena and its parts, a
 * pipeline's planner table, every rank's arena from the memory model, the
 * ZeRO table; and the communication figures of its summary. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "train.h"

static void print_model(const remat_config *cfg, const opts *o) {
  remat_config whole = *cfg; /* a tensor rank's config describes its shard */
  whole.tensor_parallel = whole.sequence_parallel = 0;
  if (cfg->family == REMAT_FAMILY_LLAMA)
    printf("model   Llama L=%lld C=%lld NH=%lld NKV=%lld H=%lld V=%lld maxT=%lld theta=%g, "
           "%s head, %zu parameters\n",
           (long long)cfg->num_layers, (long long)cfg->channels, (long long)cfg->num_heads,
           (long long)cfg->kv_heads, (long long)cfg->ffn_hidden, (long long)cfg->vocab_size,
           (long long)cfg->max_seq_len, cfg->rope_theta, cfg->untied ? "untied" : "tied",
           remat_param_count(&whole));
  else
    printf("model   L=%lld C=%lld NH=%lld V=%lld (padded %lld) maxT=%lld, %zu parameters\n",
           (long long)cfg->num_layers, (long long)cfg->channels, (long long)cfg->num_heads,
           (long long)cfg->vocab_size, (long long)cfg->padded_vocab_size,
           (long long)cfg->max_seq_len, remat_param_count(&whole));
  if (cfg->tensor_parallel > 1)
    printf("tensor  %lld tensor ranks: each holds %zu of the %zu parameters (its heads, its "
           "share of the MLP and of the vocabulary; the norms, and GPT-2's positions and "
           "projection biases, whole)\n", (long long)cfg->tensor_parallel, remat_param_count(cfg),
           remat_param_count(&whole));
  if (cfg->precision == REMAT_PRECISION_BF16)
    printf("precision bf16 products and activations, fp32 master weights, gradients and "
           "moments (%s)\n", o->precision_note);
  else
    printf("precision fp32 (%s)\n", o->precision_note);
  if (cfg->head_chunk > 0) {
    int64_t N = o->d.train.B * o->d.train.T;
    printf("head    logits in chunks of %lld of a micro-batch's %lld tokens (%lld x %lld at a "
           "time), each turned into its loss and gradient and dropped (%s)\n",
           (long long)cfg->head_chunk, (long long)N, (long long)cfg->head_chunk,
           (long long)cfg->padded_vocab_size,
           o->d.head_chunk > 0 ? "--head-chunk" : o->d.plan ? "the plan's"
                                                : "--head-chunk auto: the budget needs them");
  }
}

/* The budgets of --mem as bytes and binary units ("8G" is 8000000000
 * bytes, 7.45 GiB), by the library's one parser. */
static void print_budgets(const char *mem) {
  remat_budgets b;
  remat_error err;
  char s[32];
  if (remat_budgets_parse(&b, mem, &err)) return; /* the job parsed it: cannot fail here */
  for (int64_t k = 0; k < b.n; k++)
    printf("%s%zu bytes (%s)", k ? ", " : "", b.bytes[k],
           remat_format_bytes(b.bytes[k], s, sizeof s));
  remat_budgets_free(&b);
}

/* The blocks of one policy, "0,1,2" (at most 24, then ",..."). */
static void block_list(const remat_memplan *mp, int policy, char *buf, size_t cap) {
  int64_t shown = 0, all = 0;
  buf[0] = 0;
  const uint8_t *pol = remat_memplan_policy(mp);
  for (int64_t l = 0; l < remat_memplan_num_blocks(mp); l++) {
    if (pol[l] != policy) continue;
    all++;
    if (shown < 24) {
      snprintf(buf + strlen(buf), cap - strlen(buf), "%s%lld", shown ? "," : "", (long long)l);
      shown++;
    }
  }
  if (all > shown) strncat(buf, ",...", cap - strlen(buf) - 1);
}

/* --plan-only: each policy's bytes per block and micro-batch (what it
 * stores, and the workspace its backward needs) and its recompute time, as
 * the planner has them (the memory model's bytes; GFLOP of one
 * micro-batch). */
static void print_policies(remat_job *job) {
  remat_plan_problem pb;
  remat_error err;
  if (remat_plan_problem_from_job(&pb, job, &err)) return;
  const remat_plan_group *g = &pb.groups[REMAT_LAYER_BLOCK];
  double fb = g->fwd + g->bwd;
  struct {
    int pol;
    size_t stores, work;
    double t;
    const char *what;
  } row[3] = {{REMAT_KEEP, g->act_bytes, g->work_bytes, 0, ""},
              {REMAT_MIDDLE, g->middle_bytes, g->middle_recompute_bytes, g->middle_recompute,
               "its layernorms and GELU"},
              {REMAT_RECOMPUTE, g->ckpt_bytes, g->recompute_bytes, g->recompute, "its forward"}};
  printf("blocks  numbered 0..%lld here; remat plan numbers them as its layers 1-%lld (0 the "
         "embedding, %lld the head)\n", (long long)g->count - 1, (long long)g->count,
         (long long)g->count + 1);
  for (int k = 0; k < 3; k++) {
    char b1[32], b2[32];
    printf("blocks  %-6s stores %s per block and micro-batch; backward workspace %s; ",
           remat_policy_name(row[k].pol), remat_format_bytes(row[k].stores, b1, sizeof b1),
           remat_format_bytes(row[k].work, b2, sizeof b2));
    if (row[k].pol == REMAT_KEEP)
      printf("no rerun\n");
    else
      printf("reruns %s, %.4g GFLOP (%.1f%% of its forward and backward)\n", row[k].what,
             row[k].t, fb > 0 ? 100 * row[k].t / fb : 0.0);
  }
  /* as remat plan's objective of one stage: a micro-batch's time with the
   * policy's reruns against none */
  double plain = 0, rerun = 0;
  for (int64_t k = 0; k < pb.num_groups; k++)
    plain += (double)pb.groups[k].count * (pb.groups[k].fwd + pb.groups[k].bwd);
  const uint8_t *pol = remat_memplan_policy(remat_trainer_memplan(remat_job_trainer(job)));
  for (int64_t l = 0; l < g->count; l++)
    rerun += pol[l] == REMAT_RECOMPUTE ? g->recompute : pol[l] == REMAT_MIDDLE ? g->middle_recompute : 0;
  printf("time    %.6g GFLOP a micro-batch, without recomputation %.6g, slowdown %.4g (remat "
         "plan's objective for one stage)\n", plain + rerun, plain,
         plain > 0 ? (plain + rerun) / plain : 1.0);
  remat_plan_problem_free(&pb);
}

static void print_plan(remat_job *job, const remat_config *cfg, const remat_memplan *mp,
                       size_t planned, const char *source, const remat_tokens *tok,
                       const opts *o) {
  char rec[256], mid[256], b1[32], b2[32], b3[32], b4[32], b5[32];
  int64_t L = cfg->num_layers, nrec = remat_memplan_num_recomputed(mp);
  int64_t nmid = remat_memplan_num_middle(mp);
  size_t peak = remat_memplan_peak_bytes(mp), persistent = remat_memplan_persistent_bytes(mp);
  size_t comm = remat_memplan_bytes(mp).comm;
  block_list(mp, REMAT_RECOMPUTE, rec, sizeof rec);
  block_list(mp, REMAT_MIDDLE, mid, sizeof mid);
  print_model(cfg, o);
  printf("data    %s: %lld tokens; batch %lld x %lld, grad-accum %lld", source,
         (long long)tok->n, (long long)o->d.train.B, (long long)o->d.train.T,
         (long long)o->d.train.grad_accum);
  if (o->d.replicas > 1)
    printf(" per replica: %lld micro-batches a step on %lld replicas",
           (long long)(o->d.train.grad_accum * o->d.replicas), (long long)o->d.replicas);
  printf("\n");
  const remat_tokens *vt;
  if (remat_job_val_source(job, &vt) && vt) /* --val-data: evaluated apart from the data */
    printf("eval    %s: %lld tokens; the held-out loss every %lld steps on its first %lld "
           "batches (nothing of the data is held out)\n", o->d.val_data, (long long)vt->n,
           (long long)o->d.eval_every, (long long)o->d.train.eval_batches);
  printf("policy  %lld of %lld blocks recomputed%s%s%s", (long long)nrec, (long long)L,
         nrec ? " (" : "", rec, nrec ? ")" : "");
  if (nmid) printf(", %lld middle (%s)", (long long)nmid, mid);
  printf("\n");
  if (o->plan_only) print_policies(job);
  printf("memory  planned peak %s (%zu bytes) = arena %s (state %s, activations%s "
         "workspace%s %s) + data %s\n",
         remat_format_bytes(planned, b1, sizeof b1), planned,
         remat_format_bytes(peak, b2, sizeof b2), remat_format_bytes(persistent, b3, sizeof b3),
         comm ? "," : " and", comm ? " and communication" : "",
         remat_format_bytes(peak - persistent, b4, sizeof b4),
         remat_format_bytes(planned - peak, b5, sizeof b5));
  if (o->plan_only) printf("arena   %zu bytes: what --mem bounds\n", peak);
  if (o->d.memory) { /* one meaning of a budget: the arena, as remat plan has it */
    printf("budget  --mem %s = ", o->d.memory);
    print_budgets(o->d.memory);
    printf(" bounds the arena; the data is held beside it\n");
  }
}

/* A stage's slots: "n in flight x S", or where its blocks recompute per
 * micro-batch (remat_stage.full_slots) each slot's own bytes, the first n
 * - f alike: "n in flight (n - f x S + S' + S'')". */
static void print_slots(const remat_memplan *mp, const remat_stage *st) {
  char b[32];
  const uint8_t *full = remat_memplan_full_slots(mp);
  int64_t f = 0, n = st->inflight;
  for (int64_t i = 0; i < st->num_blocks; i++)
    if (full[i] > f) f = full[i];
  if (!f) {
    printf("%lld in flight x %s", (long long)n,
           remat_format_bytes(remat_memplan_slot_bytes(mp), b, sizeof b));
    return;
  }
  printf("%lld in flight (%lld x %s", (long long)n, (long long)(n - f),
         remat_format_bytes(remat_memplan_slot_bytes(mp), b, sizeof b));
  for (int64_t j = n - f; j < n; j++)
    printf(" + %s", remat_format_bytes(remat_memplan_slot(mp, j).bytes, b, sizeof b));
  printf(")");
}

/* The blocks that recompute in full in only some of the stage's slots,
 * by count: "; full in 1 of 2 slots: 0-3,5". */
static void print_full_slots(const remat_memplan *mp, const remat_stage *st) {
  const uint8_t *full = remat_memplan_full_slots(mp);
  for (int k = 1; k < 256 && k < st->inflight; k++) {
    int64_t shown = 0;
    for (int64_t i = 0; i < st->num_blocks; i++) {
      if (full[i] != k || (i > 0 && full[i - 1] == k)) continue;
      int64_t e = i;
      while (e + 1 < st->num_blocks && full[e + 1] == k) e++;
      if (!shown) printf("; full in %d of %lld slots: ", k, (long long)st->inflight);
      printf(shown ? ",%lld" : "%lld", (long long)(st->first_block + i));
      if (e > i) printf("-%lld", (long long)(st->first_block + e));
      shown++;
    }
  }
}

/* Rank k's pool of its chunks' slots and W records, where its stages pool
 * them (remat_job_rank_pool). */
static void print_pool(const remat_job *job, int k, int stage_named) {
  size_t bytes, apart;
  remat_error err;
  char b[2][32];
  if (remat_job_rank_pool(job, k, &bytes, &apart, &err) || !bytes) return;
  printf("%s %d pool %s (%zu bytes): its slots and W records, laid out over its stream "
         "(side by side %s)\n", stage_named ? "stage" : "rank", k,
         remat_format_bytes(bytes, b[0], sizeof b[0]), bytes,
         remat_format_bytes(apart, b[1], sizeof b[1]));
}

/* Every rank's arena, from the memory model, before any exists: replicas
 * (rank k), a pipeline's stages, or the grid's ranks (rank s D + r). */
static void print_ranks(remat_job *job, const opts *o) {
  remat_error err;
  char b[8][32];
  remat_run_kind kind = remat_job_kind(job);
  int64_t v = remat_job_chunks(job);
  for (int q = 0; q < remat_job_ranks(job) * v; q++) {
    int k = (int)(q / v);
    int64_t c = q % v;
    remat_stage st;
    remat_memplan *mp;
    if (remat_job_chunk_memplan(job, k, c, &st, &mp, &err)) continue;
    remat_membuf m[REMAT_BUF_COUNT];
    for (int i = 0; i < REMAT_BUF_COUNT; i++) m[i] = remat_memplan_buf(mp, i);
    remat_stage_bytes sb = remat_memplan_bytes(mp);
    size_t peak = remat_memplan_peak_bytes(mp);
    if (kind == REMAT_RUN_PIPELINE) {
      printf(v > 1 ? "stage %d chunk %lld " : "stage %d ", k, (long long)c);
      printf("arena %s (%zu bytes) = state %s + ", remat_format_bytes(peak, b[0], sizeof b[0]),
             peak, remat_format_bytes(sb.state, b[1], sizeof b[1]));
      if (!st.slots_pooled) print_slots(mp, &st), printf(" + ");
      size_t rec = remat_memplan_record_bytes(mp); /* zb-h1, zbv: its kept blocks' W records */
      if (!st.slots_pooled && rec)
        printf("%lld deferred W x %s + ", (long long)st.wdeferred,
               remat_format_bytes(rec, b[4], sizeof b[4]));
      printf("workspace %s%s; ", remat_format_bytes(sb.workspace, b[3], sizeof b[3]),
             st.work_borrowed ? " (the transient part is chunk 0's)" : "");
      if (st.slots_pooled) { /* remat_job_rank_pool's line says where */
        printf("in the rank's pool: ");
        print_slots(mp, &st);
        if (rec) printf(", %lld deferred W x %s", (long long)st.wdeferred,
                        remat_format_bytes(rec, b[4], sizeof b[4]));
        printf("; ");
      }
    } else {
      printf("rank %d ", k);
      if (kind == REMAT_RUN_GRID)
        printf("stage %lld replica %lld ", (long long)(k / o->d.replicas),
               (long long)(k % o->d.replicas));
      printf("arena %s (%zu bytes) = state %s (parameters %s, gradients %s, AdamW %s) + ",
             remat_format_bytes(peak, b[0], sizeof b[0]), peak,
             remat_format_bytes(remat_memplan_persistent_bytes(mp), b[1], sizeof b[1]),
             remat_format_bytes(m[REMAT_BUF_PARAMS].bytes, b[2], sizeof b[2]),
             remat_format_bytes(m[REMAT_BUF_GRADS].bytes + m[REMAT_BUF_TIED_GRAD].bytes, b[3],
                                sizeof b[3]),
             remat_format_bytes(m[REMAT_BUF_ADAM_M].bytes + m[REMAT_BUF_ADAM_V].bytes, b[4],
                                sizeof b[4]));
      if (kind == REMAT_RUN_GRID)
        print_slots(mp, &st);
      else
        printf("activations %s", remat_format_bytes(sb.activations, b[5], sizeof b[5]));
      printf(" + workspace %s + communication %s%s",
             remat_format_bytes(sb.workspace, b[6], sizeof b[6]),
             remat_format_bytes(sb.comm, b[7], sizeof b[7]),
             kind == REMAT_RUN_GRID ? "; " : "\n");
    }
    if (kind != REMAT_RUN_REPLICAS && st.num_blocks == 0) {
      printf("no blocks%s%s\n", st.has_embedding ? ", embedding" : "", st.has_head ? ", head" : "");
    } else if (kind != REMAT_RUN_REPLICAS) {
      printf("blocks %lld..%lld%s%s", (long long)st.first_block,
             (long long)(st.first_block + st.num_blocks - 1), st.has_embedding ? ", embedding" : "",
             st.has_head ? ", head" : "");
      print_full_slots(mp, &st);
      printf("\n");
    }
    remat_memplan_destroy(mp);
    if (c == v - 1) print_pool(job, k, kind == REMAT_RUN_PIPELINE);
  }
}

/* The ZeRO table the replicas follow (Psi parameters, persistent bytes per
 * rank: remat_state_bytes' fp32 AdamW row) and the bytes each sends a step. */
static void print_zero(const remat_config *cfg, const remat_memplan *mine, const opts *o) {
  int64_t D = o->d.replicas;
  char b[1][32], table[48];
  size_t psi = remat_param_count(cfg);
  uint64_t per[REMAT_STATE_PART_COUNT], one, ideal;
  remat_error err; /* cannot fail: the table's names, ZeRO 0-3, D >= 1 */
  remat_state_bytes(1, "fp32", "adamw", 0, 1, 1, per, &one, &err);
  remat_state_bytes(psi, "fp32", "adamw", o->d.zero, D, 1, NULL, &ideal, &err);
  unsigned whole = 0, shard = 0; /* bytes per parameter: "8 Psi + 8 Psi/D" */
  for (int k = 0; k < REMAT_STATE_PART_COUNT; k++)
    *(remat_zero_shards(o->d.zero, k) ? &shard : &whole) += (unsigned)per[k];
  int n = whole ? snprintf(table, sizeof table, "%u Psi", whole) : 0;
  if (shard) snprintf(table + n, sizeof table - (size_t)n, "%s%u Psi/D", n ? " + " : "", shard);
  printf("zero    stage %d on %lld replicas: persistent %zu bytes per rank; %s = %llu bytes "
         "(Psi = %zu; the rest is shard padding, alignment and the tied gradient)\n",
         o->d.zero, (long long)D, remat_memplan_persistent_bytes(mine), table,
         (unsigned long long)ideal, psi);
  uint64_t bytes = remat_replicas_step_bytes(cfg, D, o->d.zero, o->d.train.grad_accum);
  printf("comm    %s (%llu bytes) sent per rank per step, from the shapes\n",
         remat_format_bytes((size_t)bytes, b[0], sizeof b[0]), (unsigned long long)bytes);
}

/* Rank 0's bytes, every replica's communication time over the timed steps
 * (on a grid, stage 0's): how much of it was exposed (spent inside MPI
 * calls) and overlapped. */
void train_show_comm(const run_state *r, char *b, size_t n) {
  const remat_comm_stats *c = &r->comm_sum[0];
  double steps = r->timed_steps ? (double)r->timed_steps : 1.0;
  printf("comm    rank 0 sent %s (%llu bytes) a step in %llu collectives; %.2f ms of "
         "communication a step, %.2f ms exposed (%.1f%% of its step time)\n",
         remat_format_bytes((size_t)r->comm.bytes_sent, b, n),
         (unsigned long long)r->comm.bytes_sent, (unsigned long long)r->comm.collectives,
         1e3 * c->seconds / steps, 1e3 * c->exposed_seconds / steps,
         r->t_train > 0 ? 100 * c->exposed_seconds / r->t_train : 0.0);
  printf("overlap communication overlapped with computation, %s: all",
         r->grid ? "stage 0's replicas" : "rank by rank");
  for (int k = 0; k < r->o->d.replicas; k++)
    printf(" %.0f%%", 100 * remat_comm_overlap(r->comm_sum[k].seconds,
                                                r->comm_sum[k].exposed_seconds));
  printf("; the layers' reduce-scatters and gathers");
  for (int k = 0; k < r->o->d.replicas; k++)
    printf(" %.0f%%", 100 * remat_comm_overlap(r->comm_sum[k].layer_seconds,
                                                r->comm_sum[k].layer_exposed_seconds));
  printf("\n");
}

/* A pipeline's plan: the planner's table and every stage's arena. */
static void print_pipeline(run_state *r) {
  const opts *o = r->o;
  remat_error err;
  char *text = NULL;
  const remat_tokens *tok = remat_job_tokens(r->job);
  print_model(r->cfg, o);
  printf("data    %s: %lld tokens; batch %lld x %lld, %lld micro-batches per step",
         remat_job_data_source(r->job), (long long)tok->n, (long long)o->d.train.B,
         (long long)o->d.train.T, (long long)o->d.train.grad_accum);
  if (o->d.replicas > 1)
    printf(" per pipeline: %lld micro-batches a step on %lld pipelines",
           (long long)(o->d.train.grad_accum * o->d.replicas), (long long)o->d.replicas);
  printf("\n");
  if (remat_plan_format(remat_job_problem(r->job), remat_job_plan(r->job),
                        REMAT_PLAN_FORMAT_TABLE, &text, &err) == 0) {
    fputs(text, stdout);
    remat_plan_text_free(text);
  }
  if (o->d.memory) {
    printf("budget  --mem %s = ", o->d.memory);
    print_budgets(o->d.memory);
    printf(" a stage's arena\n");
  }
  int64_t L = r->cfg->num_layers;
  printf("layers  the table's layers are 0 the embedding, 1-%lld the blocks, %lld the head; the "
         "arenas below number the blocks 0..%lld (layer k is block k-1)\n", (long long)L,
         (long long)L + 1, (long long)L - 1);
  print_ranks(r->job, o);
}

/* The plan as the job made it; 1 to stop after it (--plan-only, or
 * stdout failed), else 0. */
int train_show_plan(run_state *r) {
  const opts *o = r->o;
  remat_job *job = r->job;
  const remat_memplan *mp = remat_trainer_memplan(r->tr);
  if (o->d.stages > 1)
    print_pipeline(r);
  else
    print_plan(job, r->cfg, mp, r->planned, remat_job_data_source(job), remat_job_tokens(job),
               o);
  if (o->d.replicas > 1 && o->d.stages == 1) {
    print_ranks(job, o);
    print_zero(r->cfg, mp, o);
  }
  if (cli_stdout_ok()) return CLI_EXIT_RUN;
  return 0;
}

