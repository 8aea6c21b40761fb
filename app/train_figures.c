/* train_figures.c: the figures `remat train` measures its run against:
 * the peak MFU is against and this machine's layer times, both kept in the
 * machine cache (remat_peak_cached, remat_calibrate_cached) or measured
 * now, and the step predicted from the layer times beside the measured
 * one. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "remat.h"
#include "train.h"

int train_peak_rate(const opts *o, run_state *r) {
  char line[256];
  printf("threads %s\n", remat_threads_describe(&r->threads, line, sizeof line));
  if (o->peak_gflops > 0) {
    printf("peak    %.1f GFLOP/s given\n", o->peak_gflops);
    r->peak = (remat_peak){.flops = o->peak_gflops * 1e9};
    return 0;
  }
  remat_error err;
  remat_cache_note note;
  if (remat_peak_cached(&r->peak, r->cfg, o->d.train.B, o->d.train.T, 0.5, o->measure_peak,
                        &note, &err))
    return cli_fail(CLI_EXIT_RUN, "%s%s", err.msg,
                    err.code == REMAT_ENOMEM ? " (--peak-gflops gives the rate)" : "");
  const remat_peak *p = &r->peak;
  printf("peak    %s %.1f GFLOP/s measured on %d threads (MFU is against this)\n",
         r->cfg->precision == REMAT_PRECISION_BF16 ? "bf16 products (oneDNN)" : "sgemm",
         p->flops / 1e9, omp_get_max_threads());
  printf("peak    the median of %d trials of the model's %d matrix-product shapes, spread "
         "+-%.1f%%; best %.1f, slowest %.1f\n",
         p->trials, p->shapes, 100 * p->spread, p->best / 1e9, p->low / 1e9);
  char date[48];
  remat_cache_date(note.date, date, sizeof date);
  if (note.source == REMAT_FIGURE_CACHED)
    printf("peak    kept from %s on this machine (%s, %s), in %s; --measure-peak measures "
           "again\n", date, note.host, note.cpu, note.path);
  else if (note.source == REMAT_FIGURE_UNKEPT)
    printf("peak    measured now in %.2f s, not kept: %s\n", p->seconds, note.why);
  else
    printf("peak    measured now in %.2f s%s%s and kept in %s for later runs\n", p->seconds,
           note.source == REMAT_FIGURE_REPAIRED ? ", as " : "",
           note.source == REMAT_FIGURE_REPAIRED ? note.why : "", note.path);
  return 0;
}

void train_predict(run_state *r) {
  const opts *o = r->o;
  remat_error err;
  remat_layer_times t;
  remat_cache_note note;
  double t0 = remat_now(), s, bubble;
  if (remat_job_agree(r->job, 0, &err)) return; /* start together */
  if (o->d.tensor > 1) { /* the group's collectives, at their link as it is now */
    int nodes = 1;
    if (!remat_job_tensor_nodes(r->job, &nodes, &err) && nodes > 1)
      printf("warning this rank's tensor group sits on %d nodes, so its sums cross between "
             "them (remat plan puts a group on one node's consecutive ranks): start mpirun "
             "with --map-by slot\n", nodes);
    int rc = remat_job_measure_tensor_link(r->job, &r->tensor_link, &err);
    if ((rc = remat_job_agree(r->job, rc, &err))) {
      printf("times   no prediction: %s\n", err.msg);
      return;
    }
    printf("link    the tensor ranks' sum measured now at %.3g GB/s (a micro-batch's "
           "activations; each rank's share of the bytes), counted in the prediction\n",
           r->tensor_link / 1e9);
  }
  if (remat_calibrate_cached(r->cfg, o->d.train.B, o->d.train.T, r->ranks, 0, o->measure_times,
                             &t, &note, &err) ||
      remat_job_predict_measured(r->job, &t, &s, &bubble, &err)) {
    printf("times   no prediction: %s\n", err.msg);
    return;
  }
  char date[48];
  remat_cache_date(note.date, date, sizeof date);
  if (note.source == REMAT_FIGURE_CACHED)
    printf("times   this machine's layer times, kept from %s (%s, %s) in %s\n", date, note.host,
           note.cpu, note.path);
  else
    printf("times   this machine's layer times measured now in %.2f s (%d rounds)%s%s%s%s\n",
           remat_now() - t0, t.rounds, note.source == REMAT_FIGURE_UNKEPT ? ", not kept: " : "",
           note.source == REMAT_FIGURE_REPAIRED ? ", as " : "",
           note.source == REMAT_FIGURE_UNKEPT || note.source == REMAT_FIGURE_REPAIRED ? note.why
                                                                                    : "",
           note.source == REMAT_FIGURE_UNKEPT ? "" : ", and kept");
  r->predicted_s = s;
  r->predicted_measured = 1;
  r->predicted_kept = note.source == REMAT_FIGURE_CACHED;
  if (r->pipe) r->predicted_bubble = bubble;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double train_median_step(const run_state *r) {
  int64_t ring = (int64_t)(sizeof r->step_times / sizeof r->step_times[0]);
  int64_t n = r->timed_steps < ring ? r->timed_steps : ring;
  if (n < 1) return 0;
  double v[sizeof r->step_times / sizeof r->step_times[0]];
  memcpy(v, r->step_times, (size_t)n * sizeof v[0]);
  qsort(v, (size_t)n, sizeof v[0], by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The layer times are medians of their rounds (remat_calibrate), so they
 * are set against the median step; the mean beside it holds the pauses
 * other work on the machine caused. */
void train_show_predicted(const run_state *r, int64_t ran) {
  if (!r->predicted_measured || ran < 1) return;
  double step = train_median_step(r), mean = r->timed_steps ? r->t_train / (double)r->timed_steps
                                                            : r->wall / (double)ran;
  char what[96] = "";
  if (step > 0)
    snprintf(what, sizeof what, " (the median of %lld steps; their mean %.3f s)",
             (long long)r->timed_steps, mean);
  else /* no timed step: the run's whole time */
    step = r->pipe ? r->wall : mean;
  if (!r->pipe) {
    printf("time    step %.3f s measured%s, %.3f s predicted from this machine's layer times "
           "(%+.1f%%)%s%s\n", step, what, r->predicted_s, 100 * (r->predicted_s - step) / step,
           r->dp ? "; the replicas' communication is not counted" : "",
           r->o->d.tensor > 1 ? "; a tensor rank's shard timed alone, its group's "
                                "collectives at the link measured" : "");
  } else {
    printf("time    predicted from this machine's layer times: %+.1f%% of the measured "
           "iteration%s\n", 100 * (r->predicted_s - step) / step, what);
  }
  /* Kept times that predicted a step more than 15% slower than this run's
   * were measured while other work shared the machine: this run shows the
   * layers go at least this fast, as a fast step raises the kept peak, so
   * the kept times are scaled to it for the runs after. A slower run keeps
   * them (the load may be this run's). */
  if (r->predicted_kept && step > 0 && step < 0.85 * r->predicted_s) {
    remat_error err;
    double f = step / r->predicted_s;
    if (!remat_calibration_scale(r->cfg, r->o->d.train.B, r->o->d.train.T, r->ranks, f, &err))
      printf("times   the kept layer times predicted %.3f s and this run took %.3f s: they "
             "were measured while other work shared the machine; scaled by %.2f and kept, so "
             "later runs predict from them (--measure-times measures again)\n",
             r->predicted_s, step, f);
    else
      printf("times   the kept layer times predicted %.3f s and this run took %.3f s; not "
             "scaled: %s\n", r->predicted_s, step, err.msg);
  }
}
