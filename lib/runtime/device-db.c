/* Per-device tuning, looked up vendor -> architecture -> device -> default,
 * as CLBlast's database does. The values reach kernels as -D options. Only
 * the NVIDIA entries were measured (H100); the AMD and Intel entries follow
 * those vendors' published guides (the reason beside each value), and the
 * generic entry is safe on any OpenCL 1.2 device. Every entry's kernels are
 * compiled for its target by tests/portability/check-targets.py, through the
 * device profiles at the end of this file (docs/PORTABILITY.md).
 */
#include "runtime/runtime.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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

/* AMD GPUs. GCN and CDNA (gfx9xx: MI100 gfx908, MI200 gfx90a, MI300 gfx942)
 * run wave64: a work-group is best a multiple of 64 work-items (AMD's CDNA
 * ISA guides and the ROCm HIP programming guide: wavefront size 64). RDNA
 * (gfx10xx, gfx11xx, gfx12xx) runs wave32 natively (AMD's RDNA white paper),
 * so multiples of 32 keep every wave full. Both have 64 KiB of LDS for one
 * work-group (CDNA: 64 KiB per CU; RDNA: 128 KiB per WGP, 64 KiB per group),
 * which the launchers read from the device, not from here. ROCm's OpenCL
 * reports a maximum work-group of 256: no entry asks for more. */
static void amd(const clvarlen_device_info *info, cv_tuning *t)
{
    const bool rdna = strncmp(info->device_name, "gfx1", 4) == 0;
    t->copy_wg = 256;        /* 4 waves of 64 / 8 of 32: a row copy per group, full waves */
    t->scan_wg = 256;        /* the single-group scans: the most the runtime allows */
    t->expand_wg = 64;       /* one wave64 / two wave32: seqlens_expand is a short scan */
    t->gdn_v_tile = 16;
    t->gdn_k_lanes = 16;     /* 16 lanes per V column: 16 columns x 16 lanes = 256 */
    t->gdn_wg = rdna ? 128 : 256; /* CDNA: 4 waves per column block hide the state loads;
                                   * RDNA: 4 waves of 32 */
    t->gdn_chunk_v_tile = 16;
    t->gdn_chunk_wg = rdna ? 128 : 256;
    t->attn_block_m = 64;    /* 64 query rows: D 128 in f32 staging is 32 KiB of the 64 */
    t->attn_block_n = 32;
    t->attn_wg = rdna ? 128 : 256; /* a multiple of the wave: 4 waves of 64, 4 of 32 */
}

/* Intel Xe GPUs (Xe-LP, Xe-HPG Arc, Xe-HPC Max). Kernels run in sub-groups
 * of 8, 16 or 32 (Xe-HPC: 16 or 32) chosen by the compiler; the oneAPI GPU
 * optimization guide advises work-groups that are multiples of 32 and
 * fill an Xe-core (8 vector engines x 8 threads). Shared local memory is
 * 64 KiB per work-group on Xe-LP and Xe-HPG, 128 KiB on Xe-HPC; the launchers
 * read it from the device. */
static void intel(cv_tuning *t)
{
    t->copy_wg = 256;        /* 8 sub-groups of 32 / 16 of 16: one Xe-core's threads */
    t->scan_wg = 256;
    t->expand_wg = 64;
    t->gdn_v_tile = 16;
    t->gdn_wg = 128;         /* 16 columns x 8 lanes: multiples of 16 and 32 */
    t->gdn_k_lanes = 8;
    t->gdn_chunk_v_tile = 16;
    t->gdn_chunk_wg = 128;
    t->attn_block_m = 32;    /* 32 rows x D 128 in f32: 16 KiB, a quarter of Xe-HPG's SLM */
    t->attn_block_n = 32;
    t->attn_wg = 128;        /* a multiple of 32: whole sub-groups at any width */
}

bool cv_device_is_llvmpipe(const clvarlen_device_info *info)
{
    return strncmp(info->device_name, "llvmpipe", 8) == 0;
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
        /* Sweeps (docs/PERFORMANCE.md): the token kernel at 32 columns per
         * group, 64 work-items, 16 of them per column, without the next-token
         * prefetch: on an H200 decode at 0.96-0.98x copy bandwidth (N 256,
         * 1024) against 0.93-0.94x with 128 work-items; on an H100 both 0.98-1.00x
         * (against 0.82x at 16 columns with the prefetch), token-by-token
         * prefill of short sequences 8-9% faster; attention's portable kernel best
         * at 128 work-items (8 x 8 outputs each), staging Q and K 16
         * dimensions (wider where registers allow, lib/attention) and V 16
         * keys at a time (f32, 16 x 16384, D 128 on the H200: 33.9 TFLOP/s,
         * 0.55x the FMA rate, against 31.5 at 32 keys and 32.2 at 32
         * dimensions; docs/PERFORMANCE.md). */
        t->gdn_v_tile = 32;
        t->gdn_wg = 64;
        t->gdn_k_lanes = 16;
        t->gdn_no_prefetch = 1;
        t->attn_block_m = 64;
        t->attn_block_n = 64;
        t->attn_wg = 128;
        t->attn_dch = 16;
        t->attn_kch = 16;
        /* mma.sync.m16n8k16 with bf16 needs sm_80 or later. */
        t->nvidia_mma = info->cc_major >= 8;
        break;
    case CLVARLEN_VENDOR_AMD:
        amd(info, t);
        break;
    case CLVARLEN_VENDOR_INTEL:
        intel(t);
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
        /* AUTO: sequences of 512 tokens or more chunked, through CLBlast only (PoCL, 2
         * cores, H 16, HV 32, K = V = 128, bf16, 1 to 8 sequences: chunked 3-7% faster
         * than token by token at 512 tokens, 10-11% at 1024, 14% at 2048; at 256 from
         * 1% faster to 8% slower; docs/PERFORMANCE.md) */
        t->gdn_chunk_min = 512;
        t->attn_block_m = 16;
        t->attn_block_n = 32;
        t->attn_wg = 16;
        /* Mesa's llvmpipe (rusticl; Mesa 22.3) silently ends every loop of a
         * work-item once all its loops together have run 65535 iterations
         * (gallivm's loop limiter): with one K lane the token kernel runs about
         * 650 iterations per token at K 128, so o was zero from token 100 on.
         * 16 lanes leave loops of K / 16 <= 16 iterations, which Mesa unrolls:
         * about 3 per token (docs/PORTABILITY.md says what stays limited). */
        if (cv_device_is_llvmpipe(info)) {
            t->gdn_chunk_min = 0; /* not measured there: AUTO token by token */
            t->gdn_k_lanes = 16;
            t->gdn_wg = 256; /* 16 columns x 16 lanes */
        }
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

/* ------------------------------------------------------------ device profiles */

/* Stand-ins for devices no test machine has: CLVARLEN_DEVICE_PROFILE=<name>
 * makes a context describe its device as the profile's (vendor, name, local
 * memory, work-group limit), so the device table and every launcher choose
 * the kernels and -D options that device would get, while the programs still
 * build and run on the real device (PoCL, whose limits are wider than any
 * profile's). tests/portability/check-targets.py runs `clvarlen-test
 * precompile` so and compiles what was built for the profile's target
 * (docs/PORTABILITY.md). A developer knob, not an API: never set it in use. */
typedef struct cv_profile {
    const char *name;
    clvarlen_vendor vendor;
    uint32_t vendor_id;
    const char *device_name; /* as the vendor's driver reports it */
    uint64_t local_mem;      /* bytes of local memory one work-group may use */
    uint64_t max_wg;         /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    uint32_t compute_units;
} cv_profile;

static const cv_profile profiles[] = {
    /* AMD Instinct MI210/MI250 (CDNA2): 64 KiB LDS per CU; ROCm reports 256 */
    {"amd-gfx90a", CLVARLEN_VENDOR_AMD, 0x1002, "gfx90a:sramecc+:xnack-", 65536, 256, 104},
    /* AMD Radeon RX 7900 XTX (RDNA3): 64 KiB LDS per work-group */
    {"amd-gfx1100", CLVARLEN_VENDOR_AMD, 0x1002, "gfx1100", 65536, 256, 48},
    /* Intel Arc A770 (Xe-HPG): 64 KiB SLM per work-group, 1024 work-items */
    {"intel-xe-hpg", CLVARLEN_VENDOR_INTEL, 0x8086, "Intel(R) Arc(TM) A770 Graphics", 65536,
     1024, 512},
    /* Intel Data Center GPU Max 1550 (Xe-HPC): 128 KiB SLM per work-group */
    {"intel-xe-hpc", CLVARLEN_VENDOR_INTEL, 0x8086, "Intel(R) Data Center GPU Max 1550", 131072,
     1024, 1024},
    /* Any other OpenCL 1.2 GPU: the minimum local memory of the full profile */
    {"generic", CLVARLEN_VENDOR_OTHER, 0, "OpenCL 1.2 GPU", 32768, 256, 16},
};

int cv_device_profile_apply(clvarlen_device_info *info, char *note, size_t note_size)
{
    const char *name = getenv("CLVARLEN_DEVICE_PROFILE");
    if (!name || !*name)
        return 0;
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++) {
        const cv_profile *p = &profiles[i];
        if (strcmp(name, p->name) != 0)
            continue;
        snprintf(note, note_size, "CLVARLEN_DEVICE_PROFILE=%s: kernels chosen for %s, built "
                 "and run on %s", name, p->device_name, info->device_name);
        info->vendor = p->vendor;
        info->vendor_id = p->vendor_id;
        info->kind = CLVARLEN_DEVICE_DISCRETE_GPU;
        snprintf(info->device_name, sizeof info->device_name, "%s", p->device_name);
        info->local_mem_bytes = p->local_mem;
        info->max_work_group_size = p->max_wg;
        info->compute_units = p->compute_units;
        info->cc_major = info->cc_minor = 0;
        return 1;
    }
    int at = snprintf(note, note_size, "CLVARLEN_DEVICE_PROFILE=%s names no profile (", name);
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (at >= 0 && (size_t)at < note_size)
            at += snprintf(note + at, note_size - (size_t)at, "%s%s", i ? ", " : "",
                           profiles[i].name);
    if (at >= 0 && (size_t)at < note_size)
        snprintf(note + at, note_size - (size_t)at, ")");
    return -1;
}
