/* dnnl.c: a linear layer's three products in bf16 through oneDNN's matmul
 * primitive (oneDNN is the CPU library the field's frameworks use; it
 * picks AMX or AVX512-BF16 code at run time). Each shape's primitives are
 * made once, by remat__dnnl_create, with the scratchpad in user mode, so a
 * product at step time makes no primitive and owns no memory: it points
 * the primitive's memory objects at the caller's buffers and runs it.
 *
 * The three products of inp (N,C), weight (OC,C), dout (N,OC), row-major:
 *   forward       out (N,OC)   = inp  x weight^T + bias   weight as (C,OC), strides {1,C}
 *   to the input  dinp (N,C)   = dout x weight            weight as (OC,C), strides {C,1}
 *   to the weight dweight (OC,C) += dout^T x inp          dout as (OC,N), strides {1,OC};
 *                                                        a sum post-op accumulates
 * (the bias's gradient is the kernels', kernels/dnnl.c). */
#include <stdio.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "base/base.h"
#include "products/products.h"

enum { FWD = 0, BWD_DATA = 1, BWD_WEIGHT = 2, NKIND = 3 };
enum { ARG_SRC, ARG_WEI, ARG_BIAS, ARG_DST, ARG_SCRATCH, NARG };
static const int arg_ids[NARG] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST,
                                  DNNL_ARG_SCRATCHPAD};

typedef struct prim {
  dnnl_primitive_t p;
  dnnl_memory_t mem[NARG]; /* NULL where the product has no such argument */
} prim;

typedef struct entry {
  remat__mm_shape s;
  prim k[NKIND];
  char impl[64];
} entry;

struct remat__dnnl {
  bool describe_only; /* remat__dnnl_scratch: descriptors, no primitives */
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  int n;
  entry *e;
  size_t scratch;
};

static dnnl_status_t md2(dnnl_memory_desc_t *md, int64_t r, int64_t c, int64_t sr, int64_t sc,
                         dnnl_data_type_t t) {
  dnnl_dims_t dims = {r, c}, strides = {sr, sc};
  return dnnl_memory_desc_init_by_strides(md, 2, dims, t, strides);
}

/* One product's primitive and memory objects (handles set at run time). */
static int make(remat__dnnl *d, prim *k, const dnnl_memory_desc_t *src,
                const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                const dnnl_memory_desc_t *dst, bool accumulate, char *impl, size_t impl_len,
                const char **why) {
  dnnl_matmul_desc_t desc;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t st = dnnl_matmul_desc_init(&desc, src, wei, bias, dst);
  if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
  if (st == dnnl_success)
    st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success && accumulate) {
    st = dnnl_post_ops_create(&po);
    if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, 1.0f);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
  }
  if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &desc, attr, d->engine, NULL);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success) {
    *why = st == dnnl_unimplemented ? "oneDNN has no bf16 matmul for it on this CPU"
                                    : "oneDNN could not describe the product";
    return REMAT_EINVAL;
  }
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t sbytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
  if (sbytes > d->scratch) d->scratch = sbytes;
  if (impl) {
    const char *s = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) == dnnl_success && s)
      snprintf(impl, impl_len, "%s", s);
  }
  if (d->describe_only) {
    dnnl_primitive_desc_destroy(pd);
    return 0;
  }
  const dnnl_memory_desc_t *mds[NARG] = {src, wei, bias, dst, sbytes ? sp : NULL};
  st = dnnl_primitive_create(&k->p, pd);
  for (int a = 0; a < NARG && st == dnnl_success; a++)
    if (mds[a]) st = dnnl_memory_create(&k->mem[a], mds[a], d->engine, DNNL_MEMORY_NONE);
  dnnl_primitive_desc_destroy(pd);
  if (st != dnnl_success) {
    *why = "oneDNN could not create the primitive";
    return REMAT_ENOMEM;
  }
  return 0;
}

static int make_entry(remat__dnnl *d, entry *e, const char **why) {
  const int64_t N = e->s.N, C = e->s.C, OC = e->s.OC;
  const dnnl_data_type_t bf = dnnl_bf16, f = dnnl_f32;
  const dnnl_data_type_t ot = e->s.out_bf16 ? bf : f;
  const dnnl_data_type_t dt = e->s.out_bf16 && !e->s.dinp_fp32 ? bf : f;
  dnnl_memory_desc_t inp, wt_t, bias, out, dout, wt, dinp, dout_t, dw;
  if (md2(&inp, N, C, C, 1, bf) || md2(&wt_t, C, OC, 1, C, bf) || md2(&bias, 1, OC, OC, 1, f) ||
      md2(&out, N, OC, OC, 1, ot) || md2(&dout, N, OC, OC, 1, bf) ||
      md2(&wt, OC, C, C, 1, bf) || md2(&dinp, N, C, C, 1, dt) ||
      md2(&dout_t, OC, N, 1, OC, bf) || md2(&dw, OC, C, C, 1, f)) {
    *why = "oneDNN could not describe its tensors";
    return REMAT_EINVAL;
  }
  int rc = make(d, &e->k[FWD], &inp, &wt_t, e->s.no_bias ? NULL : &bias, &out, false, e->impl,
                sizeof e->impl, why);
  if (!rc) rc = make(d, &e->k[BWD_DATA], &dout, &wt, NULL, &dinp, false, NULL, 0, why);
  if (!rc) rc = make(d, &e->k[BWD_WEIGHT], &dout_t, &inp, NULL, &dw, true, NULL, 0, why);
  return rc;
}

static int create(remat__dnnl **out, const remat__mm_shape *shapes, int n, bool describe_only,
                  remat_error *err) {
  *out = NULL;
  remat__cpu_bf16 cpu = remat__cpu_bf16_get();
  if (!cpu.avx512_bf16)
    return remat__errorf(err, REMAT_EINVAL, "no bf16 products here (%s)", cpu.reason);
  remat__dnnl *d = remat__calloc(1, sizeof *d);
  if (!d) return remat__errorf(err, REMAT_ENOMEM, "out of memory for the bf16 products");
  d->describe_only = describe_only;
  d->e = remat__calloc(n > 0 ? (size_t)n : 1, sizeof *d->e);
  int rc = d->e ? 0 : REMAT_ENOMEM;
  if (!rc && (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success ||
              dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) !=
                  dnnl_success))
    rc = remat__errorf(err, REMAT_EINVAL, "oneDNN could not open the CPU engine");
  else if (rc)
    remat__errorf(err, rc, "out of memory for the bf16 products");
  for (int i = 0; i < n && !rc; i++) {
    const char *why = "";
    d->e[i].s = shapes[i];
    d->n = i + 1;
    rc = make_entry(d, &d->e[i], &why);
    if (rc)
      remat__errorf(err, rc, "bf16 product %lld x %lld by %lld x %lld: %s",
                    (long long)shapes[i].N, (long long)shapes[i].C, (long long)shapes[i].OC,
                    (long long)shapes[i].C, why);
  }
  if (rc) {
    remat__dnnl_destroy(d);
    return rc;
  }
  *out = d;
  return 0;
}

int remat__dnnl_create(remat__dnnl **out, const remat__mm_shape *shapes, int n,
                       remat_error *err) {
  return create(out, shapes, n, false, err);
}

int remat__dnnl_scratch(const remat__mm_shape *shapes, int n, size_t *bytes, remat_error *err) {
  remat__dnnl *d;
  *bytes = 0;
  int rc = create(&d, shapes, n, true, err);
  if (rc) return rc;
  *bytes = d->scratch;
  remat__dnnl_destroy(d);
  return 0;
}

void remat__dnnl_destroy(remat__dnnl *d) {
  if (!d) return;
  for (int i = 0; i < d->n; i++)
    for (int k = 0; k < NKIND; k++) {
      for (int a = 0; a < NARG; a++)
        if (d->e[i].k[k].mem[a]) dnnl_memory_destroy(d->e[i].k[k].mem[a]);
      if (d->e[i].k[k].p) dnnl_primitive_destroy(d->e[i].k[k].p);
    }
  if (d->stream) dnnl_stream_destroy(d->stream);
  if (d->engine) dnnl_engine_destroy(d->engine);
  remat__free(d->e);
  remat__free(d);
}

size_t remat__dnnl_scratchpad_bytes(const remat__dnnl *d) { return d->scratch; }

const char *remat__dnnl_impl(const remat__dnnl *d, int i) {
  return i >= 0 && i < d->n ? d->e[i].impl : "";
}

/* The entry of a product: its shape, and the type of its output (the
 * forward's out, ob, and whether it adds a bias; or, with bwd, the
 * backward's dinp). */
static const entry *find(const remat__dnnl *d, int64_t N, int64_t C, int64_t OC, bool ob,
                         bool bwd, bool bias) {
  for (int i = 0; i < d->n; i++) {
    const remat__mm_shape *s = &d->e[i].s;
    bool t = bwd ? s->out_bf16 && !s->dinp_fp32 : s->out_bf16;
    if (s->N == N && s->C == C && s->OC == OC && t == ob && (bwd || bias == !s->no_bias))
      return &d->e[i];
  }
  return NULL;
}

/* Points k's memory objects at the buffers and runs it. */
static void run(remat__dnnl *d, const prim *k, const void *src, const void *wei,
                const void *bias, void *dst, void *scratch) {
  const void *h[NARG] = {src, wei, bias, dst, scratch};
  dnnl_exec_arg_t args[NARG];
  int na = 0;
  for (int a = 0; a < NARG; a++) {
    if (!k->mem[a]) continue;
    REMAT_ASSERT(dnnl_memory_set_data_handle(k->mem[a], (void *)h[a]) == dnnl_success);
    args[na++] = (dnnl_exec_arg_t){arg_ids[a], k->mem[a]};
  }
  REMAT_ASSERT(dnnl_primitive_execute(k->p, d->stream, na, args) == dnnl_success);
  REMAT_ASSERT(dnnl_stream_wait(d->stream) == dnnl_success);
}

void remat__dnnl_forward(remat__dnnl *d, void *out, const uint16_t *inp, const uint16_t *weight,
                         const float *bias, int64_t N, int64_t C, int64_t OC, bool out_bf16,
                         void *scratch) {
  const entry *e = find(d, N, C, OC, out_bf16, false, bias != NULL);
  REMAT_ASSERT(e); /* every shape is made at set-up */
  run(d, &e->k[FWD], inp, weight, bias, out, scratch);
}

void remat__dnnl_backward(remat__dnnl *d, void *dinp, float *dweight, const uint16_t *dout,
                          const uint16_t *inp, const uint16_t *weight, int64_t N, int64_t C,
                          int64_t OC, bool dinp_bf16, void *scratch) {
  const entry *e = find(d, N, C, OC, dinp_bf16, true, false);
  REMAT_ASSERT(e); /* every shape is made at set-up */
  if (dinp) run(d, &e->k[BWD_DATA], dout, weight, NULL, dinp, scratch);
  if (dweight) run(d, &e->k[BWD_WEIGHT], dout, inp, NULL, dweight, scratch);
}
