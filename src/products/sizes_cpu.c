/* sizes_cpu.c: the CPU backend's sizes (products/sizes.h), the one
 * definition of each of its figures: the attention kernels keep one
 * log-sum-exp per row and head from the forward and fill one rowsum per
 * row and head in the backward (their tiles live on the thread's stack);
 * the tied embedding backward (kernels/layers.c) carves its work into B*T*C
 * floats, one row per distinct token, then V int32 (token -> row) and B*T
 * int32 (position -> row); the products' scratchpad is oneDNN's. */
#include "products/products.h"

static void cpu_workspace(remat__kernel_ws *ws, int64_t B, int64_t T, int64_t C, int64_t NH,
                          int64_t V) {
  size_t BT = (size_t)B * (size_t)T;
  ws->attention_stats = BT * (size_t)NH;
  ws->attention_scratch = BT * (size_t)NH;
  ws->encoder_tied = BT * (size_t)C * sizeof(float) + ((size_t)V + BT) * sizeof(int32_t);
}

const remat__backend_sizes remat__cpu_sizes = {
    .align = REMAT_ALIGN,
    .workspace = cpu_workspace,
    .product_scratch = remat__dnnl_scratch,
};
