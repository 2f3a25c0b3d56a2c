/* Per-device tuning, looked up vendor -> architecture -> device -> default,
 * as CLBlast's database does. The values reach kernels as -D options. Only
 * the NVIDIA entries were measured (H100); AMD and Intel values are the
 * conservative choices their wave/sub-group widths suggest, and the generic
 * entry is safe on any OpenCL 1.2 device.
 */
#include "runtime/runtime.h"

#include <string.h>

static void generic(cv_tuning *t)
{
    t->copy_wg = 256;
    t->copy_rows_per_wg = 1;
    t->scan_wg = 256;
    t->gdn_v_tile = 16;
    t->gdn_wg = 64;
    t->gdn_k_lanes = 8;
    t->gdn_chunk_v_tile = 16;
    t->gdn_chunk_wg = 256;
    t->gdn_chunk_min = 0; /* AUTO stays token by token (see lib/gated-delta/) */
    t->attn_block_m = 32;
    t->attn_block_n = 32;
    t->attn_wg = 64;
    t->nvidia_mma = 0;
}

void cv_tuning_for(const clvarlen_device_info *info, cv_tuning *t)
{
    memset(t, 0, sizeof *t);
    generic(t);
    if (!info)
        return;
    switch (info->vendor) {
    case CLVARLEN_VENDOR_NVIDIA:
        t->copy_wg = 256;
        t->scan_wg = 1024;
        t->expand_wg = 64; /* H100: 8.0 us at 64/128, 10-12 us at 256-1024 */
        /* H100 sweeps (docs/PERFORMANCE.md): the token kernel best at 32
         * columns per group, 128 work-items, 16 of them per column, without the
         * next-token prefetch (128 registers, not 167): decode at 1.00x copy
         * bandwidth (N 256, 1024) against 0.82x at 16 columns with the prefetch,
         * token-by-token prefill 1.5x faster; attention's portable kernel best
         * at 256 work-items. */
        t->gdn_v_tile = 32;
        t->gdn_wg = 128;
        t->gdn_k_lanes = 16;
        t->gdn_no_prefetch = 1;
        t->attn_block_m = 64;
        t->attn_block_n = 64;
        t->attn_wg = 256;
        /* mma.sync.m16n8k16 with bf16 needs sm_80 or later. */
        t->nvidia_mma = info->cc_major >= 8;
        break;
    case CLVARLEN_VENDOR_AMD:
        t->copy_wg = 256;
        t->scan_wg = 256;
        t->gdn_v_tile = 16;
        t->gdn_wg = 128;
        t->gdn_k_lanes = 16;
        t->attn_block_m = 64;
        t->attn_block_n = 32;
        t->attn_wg = 128;
        break;
    case CLVARLEN_VENDOR_INTEL:
        t->copy_wg = 256;
        t->scan_wg = 256;
        t->gdn_v_tile = 16;
        t->gdn_wg = 64;
        t->gdn_k_lanes = 8;
        t->attn_block_m = 32;
        t->attn_block_n = 32;
        t->attn_wg = 64;
        break;
    case CLVARLEN_VENDOR_CPU:
        /* OpenCL CPU devices (PoCL) run a work-group per core: fewer, wider groups. */
        t->copy_wg = 64;
        t->scan_wg = 64;
        t->gdn_v_tile = 16;
        t->gdn_wg = 32;
        t->gdn_k_lanes = 1; /* PoCL was fastest with no column split */
        t->gdn_chunk_v_tile = 32;
        t->gdn_chunk_wg = 64;
        /* PoCL (3.1, pthread) miscompiles the chunked kernel wider than 64: a branch
         * on the local id (if (lid < 64)) is taken by every work-item of the group,
         * so the output comes out zero (Oclgrind finds no fault at 128 or 256) */
        t->gdn_chunk_wg_max = 64;
        /* PoCL (2 cores), 4 x 1024 tokens: the CLBlast chunked path 527 ms against the
         * fused kernel's 788 ms (and 578 ms token by token); on an H100 standing in for a
         * GPU without tensor-core kernels it lost to both (docs/PERFORMANCE.md) */
        t->gdn_chunk_blas = 1;
        t->attn_block_m = 16;
        t->attn_block_n = 32;
        t->attn_wg = 16;
        break;
    case CLVARLEN_VENDOR_OTHER:
        break;
    }
    /* Never ask for more than the device allows; kernels assume powers of two. */
    size_t maxwg = (size_t)cv_pow2_floor(
        info->max_work_group_size ? (int64_t)info->max_work_group_size : 256);
    if (t->copy_wg > maxwg)
        t->copy_wg = maxwg;
    if (t->scan_wg > maxwg)
        t->scan_wg = maxwg;
    if (t->expand_wg > maxwg)
        t->expand_wg = maxwg;
    if (t->gdn_wg > maxwg)
        t->gdn_wg = maxwg;
    if (t->attn_wg > maxwg)
        t->attn_wg = maxwg;
}
