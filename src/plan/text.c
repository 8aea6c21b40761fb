/* text.c: what the planner's writers share: a growable text buffer, and the
 * units a problem's byte counts are shown in (the formatting itself is
 * remat_format_bytes_in, in src/base). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "plan/plan.h"

void remat__plan_printf(remat__plan_buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    size_t room = b->cap - b->len;
    va_list ap;
    va_start(ap, fmt);
    int n = b->s ? vsnprintf(b->s + b->len, room, fmt, ap) : -2;
    va_end(ap);
    if (n >= 0 && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    if (n == -1) {
      b->oom = 1;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 4096;
    while (n >= 0 && cap < b->len + (size_t)n + 1) cap *= 2;
    char *s = remat__malloc(cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    if (b->s) memcpy(s, b->s, b->len + 1);
    else s[0] = 0;
    remat__free(b->s);
    b->s = s;
    b->cap = cap;
  }
}

void remat_plan_text_free(char *text) { remat__free(text); }

/* Binary units when every budget is a whole number of MiB (as from --mem
 * 20GiB), decimal otherwise (as in the seed's "20 GB"). */
int remat__plan_units(const remat_plan_problem *pb) {
  for (int64_t s = 0; s < pb->stages; s++)
    if (pb->memory[s] == 0 || pb->memory[s] % (1u << 20)) return REMAT_UNITS_DECIMAL;
  return REMAT_UNITS_BINARY;
}
