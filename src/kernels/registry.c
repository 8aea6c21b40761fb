/* registry.c: the backends compiled into this build, the CPU reference
 * first. A second backend (src/kernels/cuda, say) adds its table here. */
#include "kernels/backend.h"
#include "remat/base.h"

const remat__backend *remat__backend_at(int i) {
  const remat__backend *all[] = {remat__backend_cpu()};
  return i >= 0 && i < (int)(sizeof all / sizeof all[0]) ? all[i] : NULL;
}

const char *remat_backend_name(int i) {
  const remat__backend *b = remat__backend_at(i);
  return b ? b->name : NULL;
}
