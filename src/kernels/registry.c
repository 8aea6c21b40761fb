/* registry.c: the backends compiled into this build, the CPU reference
 * first, then the guard backend the tests run under; and the one models are
 * made on when none is named. The CUDA backend (src/kernels/cuda), where the
 * toolkit was found, comes last, and is chosen only by name. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/backend.h"
#include "memory/layout.h"
#ifdef REMAT_HAVE_CUDA
#include "kernels/backend_cuda.h"
#endif

const remat__backend *remat__backend_at(int i) {
  const remat__backend *all[] = {remat__backend_cpu(), remat__backend_guard(),
#ifdef REMAT_HAVE_CUDA
                                 remat__backend_cuda(), /* listed, never the default */
#endif
  };
  return i >= 0 && i < (int)(sizeof all / sizeof all[0]) ? all[i] : NULL;
}

const char *remat_backend_name(int i) {
  const remat__backend *b = remat__backend_at(i);
  return b ? b->name : NULL;
}

static const remat__backend *chosen;

int remat_backend_select(const char *name, remat_error *err) {
  for (int i = 0; remat__backend_at(i); i++)
    if (strcmp(remat__backend_at(i)->name, name) == 0) {
#ifdef REMAT_HAVE_CUDA
      /* built in, but there may be no GPU here: say so, one line */
      if (remat__backend_at(i) == remat__backend_cuda() && remat__cuda_usable(err)) return REMAT_EINVAL;
#endif
      chosen = remat__backend_at(i);
      remat__memory_plan_for(chosen->sizes); /* the planner plans for it */
      return 0;
    }
  char names[256] = "";
  for (int i = 0; remat__backend_at(i); i++) {
    if (i) strncat(names, ", ", sizeof names - strlen(names) - 1);
    strncat(names, remat__backend_at(i)->name, sizeof names - strlen(names) - 1);
  }
  return remat__errorf(err, REMAT_EINVAL, "no backend named '%s' in this build (it has: %s)",
                       name, names);
}

const char *remat_backend_selected(void) { return remat__backend_default()->name; }

int remat_backend_device_bf16(const char **why) {
  const remat__backend *be = remat__backend_default();
  if (why) *why = be->products_create ? "its own bf16 products" : "no bf16 products";
  return be->device && be->products_create;
}

const remat__backend *remat__backend_default(void) {
  if (!chosen) {
    const char *env = getenv("REMAT_BACKEND");
    if (env && *env && remat_backend_select(env, NULL) == 0) return chosen;
    chosen = remat__backend_cpu();
  }
  return chosen;
}
