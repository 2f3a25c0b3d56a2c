/* probe-tma: can Hopper's TMA tensor copies run from OpenCL? CUDA programs get a
 * tensor map (the 128-byte descriptor `cp.async.bulk.tensor` reads) from the
 * driver API's cuTensorMapEncodeTiled, which an OpenCL program cannot call.
 * This probe builds one on the device instead: a kernel fills a zeroed
 * 128-byte buffer field by field with `tensormap.replace` (PTX ISA 8.3,
 * sm_90a), then other kernels stage tiles with it. Routes and patch step as
 * the library's tensor-core kernels (cl/nv-wgmma.clh, lib/runtime/ptx-patch.c:
 * sm_90a instructions behind the `// CVW ` marker, target patched); the
 * cluster kernel's entry also gets `.reqnctapercluster 2, 1, 1` here. Not
 * installed; NVIDIA Hopper only.
 *
 *   probe-tma map ENC     the map built with encoding ENC (bit 0: rank stored
 *                         as rank - 1; bit 1: box sizes - 1; bit 2: element
 *                         strides - 1; bit 3: global sizes - 1; bit 4:
 *                         the row stride in 16-byte units), then
 *                         64 x 128 bf16 tiles of a matrix of 2048-byte rows
 *                         (K of one head at Hk 8, D 128) staged by two 64 x 64
 *                         boxes in the 128-byte swizzle, rows past the end
 *                         zero-filled; every byte checked
 *   probe-tma cluster ENC the same tiles staged by work-group pairs of one
 *                         cluster: each issues one box, multicast to both
 *   probe-tma lmem        whether a work-group may have more than 48 KiB of
 *                         static local memory (an mbarrier beside the
 *                         attention forward's 48 KiB of Q, K and V tiles)
 *   probe-tma stream ENC  staging rate, 16 KiB tiles, two in flight per
 *                         work-group, rows contiguous or 2048 bytes apart
 *                         (compare bench-l2-stage)
 *
 * ENC defaults to 1, the encoding an H200 with driver 580.159.04 takes (the
 * others fail; docs/PERFORMANCE.md). One mode per process: a bad map may end
 * the context. Exit 0: right; 77: no NVIDIA device.
 *
 * SPDX-License-Identifier: MIT
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "bench-cl-device.h"
#include "runtime/ptx-patch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A 64 x 64 box of 16-bit elements lands in local memory as 64 rows of 128
 * bytes, 16-byte unit u of row r at unit u ^ (r % 8) (the 128-byte swizzle,
 * cl/nv-wgmma.clh's layout). */
/* In parts: ISO C caps a string literal at 4095 characters. */
static const char *src[] = {
    "#define CVW(s) \"// CVW \" s \"\\n\\t\"\n"
    "__kernel void build_map(__global uchar *map, __global const ushort *base, uint rank_v,\n"
    "                        uint box_v, uint es_v, uint gdim0, uint gdim1, ulong gstride)\n"
    "{\n"
    "  ulong m = (ulong)map; /* field values that must be immediates: u16 elements (1), no\n"
    "                          interleave, the 128-byte swizzle (3), zero fill */\n"
    "  asm volatile(CVW(\"tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;\")\n"
    "               CVW(\"tensormap.replace.tile.rank.global.b1024.b32 [%0], %2;\")\n"
    "               CVW(\"tensormap.replace.tile.box_dim.global.b1024.b32 [%0], 0, %3;\")\n"
    "               CVW(\"tensormap.replace.tile.box_dim.global.b1024.b32 [%0], 1, %3;\")\n"
    "               CVW(\"tensormap.replace.tile.element_stride.global.b1024.b32 [%0], 0, %4;\")\n"
    "               CVW(\"tensormap.replace.tile.element_stride.global.b1024.b32 [%0], 1, %4;\")\n"
    "               CVW(\"tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 0, %5;\")\n"
    "               CVW(\"tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %6;\")\n"
    "               CVW(\"tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 0, %7;\")\n"
    "               CVW(\"tensormap.replace.tile.elemtype.global.b1024.b32 [%0], 1;\")\n"
    "               CVW(\"tensormap.replace.tile.interleave_layout.global.b1024.b32 [%0], 0;\")\n"
    "               CVW(\"tensormap.replace.tile.swizzle_mode.global.b1024.b32 [%0], 3;\")\n"
    "               CVW(\"tensormap.replace.tile.fill_mode.global.b1024.b32 [%0], 0;\")\n"
    "               CVW(\"fence.proxy.tensormap::generic.release.gpu;\")\n"
    "               :: \"l\"(m), \"l\"((ulong)base), \"r\"(rank_v), \"r\"(box_v), \"r\"(es_v),\n"
    "                  \"r\"(gdim0), \"r\"(gdim1), \"l\"(gstride) : \"memory\");\n"
    "}\n"
    ,
    "#define ALIGNED_1K(raw) ((__local uint4 *)(((size_t)(raw) + 1023) & ~(size_t)1023))\n"
    "#define SADDR(p) ((uint)(size_t)(p))\n"
    "static void bar_init(__local ulong *bar)\n"
    "{\n"
    "  asm volatile(CVW(\"mbarrier.init.shared::cta.b64 [%0], 1;\")\n"
    "               CVW(\"fence.mbarrier_init.release.cluster;\") :: \"r\"(SADDR(bar)) : \"memory\");\n"
    "}\n"
    "static void bar_expect(__local ulong *bar, uint bytes)\n"
    "{\n"
    "  asm volatile(CVW(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\")\n"
    "               :: \"r\"(SADDR(bar)), \"r\"(bytes) : \"memory\");\n"
    "}\n"
    "static uint bar_wait(__local ulong *bar, uint parity)\n"
    "{\n"
    "  uint done = 0, spins = 0;\n"
    "  while (!done && spins < 4000000u) {\n"
    "    asm volatile(\"{ .reg .pred p; setp.ne.u32 p, 0, 0;\\n\\t\"\n"
    "                 CVW(\"mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\")\n"
    "                 \"selp.u32 %0, 1, 0, p; }\" : \"=r\"(done) : \"r\"(SADDR(bar)), \"r\"(parity)\n"
    "                 : \"memory\");\n"
    "    spins++;\n"
    "  }\n"
    "  return done;\n"
    "}\n"
    "static void tma_box(__local uint4 *dst, __global const uchar *map, int c0, int c1,\n"
    "                    __local ulong *bar)\n"
    "{\n"
    "  asm volatile(CVW(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes\"\n"
    "                   \" [%0], [%1, {%2, %3}], [%4];\")\n"
    "               :: \"r\"(SADDR(dst)), \"l\"((ulong)map), \"r\"(c0), \"r\"(c1), \"r\"(SADDR(bar))\n"
    "               : \"memory\");\n"
    "}\n"
    "static void acquire_map(__global const uchar *map)\n"
    "{\n"
    "  asm volatile(CVW(\"fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\")\n"
    "               :: \"l\"((ulong)map) : \"memory\");\n"
    "}\n"
    ,
    "/* Work-group g stages rows 64 g .. + 63 (both 64-column boxes) and writes\n"
    " * its 16 KiB of local memory out as they are. */\n"
    "__kernel __attribute__((reqd_work_group_size(128, 1, 1)))\n"
    "void tma_tile(__global const uchar *map, __global uint4 *dst, __global uint *status)\n"
    "{\n"
    "  __local uint4 raw[1024 + 64];\n"
    "  __local ulong bar[1];\n"
    "  __local uint4 *t = ALIGNED_1K(raw);\n"
    "  const uint lid = get_local_id(0), g = get_group_id(0);\n"
    "  if (lid == 0) bar_init(bar);\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (lid == 0) {\n"
    "    acquire_map(map);\n"
    "    bar_expect(bar, 16384);\n"
    "    tma_box(t, map, 0, 64 * (int)g, bar);\n"
    "    tma_box(t + 512, map, 64, 64 * (int)g, bar);\n"
    "  }\n"
    "  const uint ok = bar_wait(bar, 0);\n"
    "  for (uint i = lid; i < 1024; i += 128) dst[g * 1024 + i] = t[i];\n"
    "  if (!ok) atomic_inc(status);\n"
    "}\n"
    "/* Work-groups 2 c and 2 c + 1 form cluster c and stage rows 64 c .. + 63:\n"
    " * cluster rank r issues box r, multicast to both. */\n"
    "__kernel __attribute__((reqd_work_group_size(128, 1, 1)))\n"
    "void tma_cluster(__global const uchar *map, __global uint4 *dst, __global uint *status)\n"
    "{\n"
    "  __local uint4 raw[1024 + 64];\n"
    "  __local ulong bar[1];\n"
    "  __local uint4 *t = ALIGNED_1K(raw);\n"
    "  const uint lid = get_local_id(0), g = get_group_id(0);\n"
    "  uint rank = 0, size = 0;\n"
    "  asm volatile(CVW(\"mov.u32 %0, %%cluster_ctarank;\") CVW(\"mov.u32 %1, %%cluster_nctarank;\")\n"
    "               : \"+r\"(rank), \"+r\"(size));\n"
    "  if (lid == 0) status[1 + g] = rank | size << 8;\n"
    "  if (size != 2) { if (lid == 0) atomic_inc(status); return; } /* not a cluster launch */\n"
    "  if (lid == 0) {\n"
    "    bar_init(bar);\n"
    "    bar_expect(bar, 16384);\n"
    "  }\n"
    "  asm volatile(CVW(\"barrier.cluster.arrive.release.aligned;\")\n"
    "               CVW(\"barrier.cluster.wait.acquire.aligned;\") ::: \"memory\");\n"
    "  if (lid == 0) {\n"
    "    acquire_map(map);\n"
    "    asm volatile(\"{ .reg .b16 mask; mov.b16 mask, 3;\\n\\t\"\n"
    "                 CVW(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes\"\n"
    "                     \".multicast::cluster [%0], [%1, {%2, %3}], [%4], mask;\") \"}\"\n"
    "                 :: \"r\"(SADDR(t + 512 * (rank & 1))), \"l\"((ulong)map), \"r\"(64 * (int)(rank & 1)),\n"
    "                    \"r\"(64 * (int)(g / 2)), \"r\"(SADDR(bar)) : \"memory\");\n"
    "  }\n"
    "  const uint ok = bar_wait(bar, 0);\n"
    "  for (uint i = lid; i < 1024; i += 128) dst[g * 1024 + i] = t[i];\n"
    "  if (!ok) atomic_inc(status);\n"
    "  asm volatile(CVW(\"barrier.cluster.arrive.release.aligned;\")\n"
    "               CVW(\"barrier.cluster.wait.acquire.aligned;\") ::: \"memory\");\n"
    "}\n"
    ,
    "/* iters 16 KiB tiles per work-group, two in flight; tile (g * 7 + i * 13) %\n"
    " * ntiles as bench-l2-stage's. */\n"
    "__kernel __attribute__((reqd_work_group_size(128, 1, 1)))\n"
    "void tma_stream(__global const uchar *map, uint ntiles, uint iters, __global uint *out)\n"
    "{\n"
    "  __local uint4 raw[2048 + 64];\n"
    "  __local ulong bar[2];\n"
    "  __local uint4 *t = ALIGNED_1K(raw);\n"
    "  const uint lid = get_local_id(0), g = get_group_id(0);\n"
    "  if (lid == 0) { bar_init(bar); bar_init(bar + 1); }\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (lid == 0) acquire_map(map);\n"
    "  uint acc = 0, ok = 1;\n"
    "  for (uint i = 0; i < iters + 1; i++) {\n"
    "    if (i < iters && lid == 0) {\n"
    "      const int row = 64 * (int)((g * 7u + i * 13u) % ntiles);\n"
    "      bar_expect(bar + (i & 1), 16384);\n"
    "      tma_box(t + 1024 * (i & 1), map, 0, row, bar + (i & 1));\n"
    "      tma_box(t + 1024 * (i & 1) + 512, map, 64, row, bar + (i & 1));\n"
    "    }\n"
    "    if (i >= 1) {\n"
    "      const uint j = i - 1;\n"
    "      ok &= bar_wait(bar + (j & 1), (j >> 1) & 1);\n"
    "      acc += t[1024 * (j & 1) + (lid * 17u + j) % 1024].x;\n"
    "      barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    }\n"
    "  }\n"
    "  out[get_global_id(0)] = ok ? acc & 0x7fffffffu : 0x80000000u;\n"
    "}\n"};

enum { COLS = 128, ROW_BYTES = 2048, TILE_ROWS = 64 };

static cl_context ctx;
static cl_command_queue q;
static cl_device_id dev;

static int oom(void)
{
    fprintf(stderr, "probe-tma: out of memory\n");
    return 1;
}

/* `.reqnctapercluster 2, 1, 1` after the parameter list of the entry `name`
 * (before the `.reqntid` that reqd_work_group_size gives). */
static char *add_cluster(char *ptx, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, ".entry %s(", name);
    char *e = strstr(ptx, key);
    char *close = e ? strstr(e, ")\n") : NULL;
    if (!close)
        return ptx;
    static const char ins[] = ".reqnctapercluster 2, 1, 1\n";
    const size_t head = (size_t)(close + 2 - ptx), n = strlen(ptx);
    char *out = malloc(n + sizeof ins);
    if (!out)
        return ptx;
    memcpy(out, ptx, head);
    memcpy(out + head, ins, sizeof ins - 1);
    strcpy(out + head + sizeof ins - 1, close + 2);
    free(ptx);
    return out;
}

static cl_program build(void)
{
    cl_int e;
    cl_program pr = clCreateProgramWithSource(ctx, sizeof src / sizeof src[0], src, NULL, &e);
    e = clBuildProgram(pr, 1, &dev, "", NULL, NULL);
    char log[16384] = "";
    clGetProgramBuildInfo(pr, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    if (e != CL_SUCCESS) {
        printf("sm_90 build: %d\n%s\n", e, log);
        return NULL;
    }
    size_t bl = 0;
    clGetProgramInfo(pr, CL_PROGRAM_BINARY_SIZES, sizeof bl, &bl, NULL);
    char *bin = malloc(bl + 1);
    if (!bin)
        return NULL;
    clGetProgramInfo(pr, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL);
    bin[bl] = 0;
    char *ptx = NULL;
    size_t n = 0;
    cv_ptx_patch_result r = cv_ptx_patch_sm90a(bin, bl, &ptx, &n);
    free(bin);
    clReleaseProgram(pr);
    if (r != CV_PTX_PATCHED) {
        printf("patch: %s\n", cv_ptx_patch_message(r));
        return NULL;
    }
    ptx = add_cluster(ptx, "tma_cluster");
    const char *ce = strstr(ptx, ".entry tma_cluster(");
    const char *cb = ce ? strstr(ce, ")\n") : NULL;
    printf("tma_cluster entry after the patch: %.60s\n", cb ? cb : "(not found)");
    n = strlen(ptx);
    const unsigned char *b = (const unsigned char *)ptx;
    cl_int bs;
    pr = clCreateProgramWithBinary(ctx, 1, &dev, &n, &b, &bs, &e);
    if (e == CL_SUCCESS)
        e = clBuildProgram(pr, 1, &dev, "", NULL, NULL);
    log[0] = 0;
    clGetProgramBuildInfo(pr, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    if (e != CL_SUCCESS) {
        printf("sm_90a build: %d\n%s\n", e, log);
        const char *c = strstr(ptx, "tensormap.replace");
        printf("PTX near tensormap.replace:\n%.600s\n", c ? c : "(none)");
        return NULL;
    }
    free(ptx);
    return pr;
}

/* The map of a rows x 128 matrix at buf (rows row_bytes apart), encoded as enc says. */
static int build_map(cl_program pr, cl_mem map, cl_mem buf, cl_uint rows, cl_ulong row_bytes,
                     unsigned enc)
{
    cl_int e;
    cl_kernel k = clCreateKernel(pr, "build_map", &e);
    const cl_uchar zero[128] = {0};
    clEnqueueWriteBuffer(q, map, CL_TRUE, 0, 128, zero, 0, NULL, NULL);
    cl_uint rank_v = (enc & 1) ? 1 : 2, box_v = (enc & 2) ? 63 : 64, es_v = (enc & 4) ? 0 : 1;
    cl_uint g0 = (enc & 8) ? COLS - 1 : COLS, g1 = (enc & 8) ? rows - 1 : rows;
    cl_ulong stride = (enc & 16) ? row_bytes >> 4 : row_bytes;
    clSetKernelArg(k, 0, sizeof map, &map);
    clSetKernelArg(k, 1, sizeof buf, &buf);
    clSetKernelArg(k, 2, sizeof rank_v, &rank_v);
    clSetKernelArg(k, 3, sizeof box_v, &box_v);
    clSetKernelArg(k, 4, sizeof es_v, &es_v);
    clSetKernelArg(k, 5, sizeof g0, &g0);
    clSetKernelArg(k, 6, sizeof g1, &g1);
    clSetKernelArg(k, 7, sizeof stride, &stride);
    size_t one = 1;
    e = clEnqueueNDRangeKernel(q, k, 1, NULL, &one, &one, 0, NULL, NULL);
    cl_int f = clFinish(q);
    cl_uchar h[128];
    clEnqueueReadBuffer(q, map, CL_TRUE, 0, 128, h, 0, NULL, NULL);
    printf("map (enc %u): enqueue %d finish %d:", enc, e, f);
    for (int i = 0; i < 128; i++)
        printf("%s%02x", i % 16 ? "" : "\n  ", h[i]);
    printf("\n");
    clReleaseKernel(k);
    return e == CL_SUCCESS && f == CL_SUCCESS;
}

/* Checks tiles of rows x 128 16-bit elements (value of row r, column c: a
 * hash) staged to out, tile t (16 KiB) holding rows 64 t' .. where t' = t / per. */
static long check_tiles(const uint16_t *out, cl_uint ntiles, cl_uint rows, int per)
{
    long bad = 0;
    for (cl_uint t = 0; t < ntiles; t++)
        for (int box = 0; box < 2; box++)
            for (int r = 0; r < TILE_ROWS; r++)
                for (int u = 0; u < 8; u++)
                    for (int w = 0; w < 8; w++) {
                        const cl_uint row = (t / per) * TILE_ROWS + r;
                        const int col = box * 64 + u * 8 + w;
                        const uint16_t want =
                            row < rows ? (uint16_t)(row * 131u + col * 7u + 1u) : 0;
                        const uint16_t got =
                            out[(size_t)t * 8192 + box * 4096 + r * 64 + ((u ^ (r & 7)) * 8) + w];
                        if (got != want && bad++ < 4)
                            printf("  tile %u box %d row %d col %d: %04x, want %04x\n", t, box, r,
                                   col, got, want);
                    }
    return bad;
}

static int run_tiles(cl_program pr, const char *kname, unsigned enc, int per)
{
    const cl_uint tiles = 132, rows = tiles * TILE_ROWS - 7; /* the last 7 rows: past the end */
    const size_t bytes = (size_t)rows * ROW_BYTES;
    uint16_t *h = calloc(bytes / 2, 2);
    if (!h)
        return oom();
    for (cl_uint r = 0; r < rows; r++)
        for (int c = 0; c < COLS; c++)
            h[(size_t)r * (ROW_BYTES / 2) + c] = (uint16_t)(r * 131u + c * 7u + 1u);
    cl_int e;
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, h, &e);
    cl_mem map = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 128, NULL, &e);
    const cl_uint groups = tiles * (cl_uint)per;
    cl_mem dst = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)groups * 16384, NULL, &e);
    cl_mem status = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (1 + groups) * 4, NULL, &e);
    const cl_uint zero = 0;
    clEnqueueFillBuffer(q, status, &zero, 4, 0, (1 + groups) * 4, 0, NULL, NULL);
    if (!build_map(pr, map, buf, rows, ROW_BYTES, enc))
        return 1;
    cl_kernel k = clCreateKernel(pr, kname, &e);
    clSetKernelArg(k, 0, sizeof map, &map);
    clSetKernelArg(k, 1, sizeof dst, &dst);
    clSetKernelArg(k, 2, sizeof status, &status);
    size_t lws = 128, gws = groups * lws;
    e = clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, NULL);
    cl_int f = clFinish(q);
    uint16_t *out = calloc((size_t)groups * 8192, 2);
    cl_uint *st = calloc(1 + groups, 4);
    if (!out || !st)
        return oom();
    clEnqueueReadBuffer(q, dst, CL_TRUE, 0, (size_t)groups * 16384, out, 0, NULL, NULL);
    clEnqueueReadBuffer(q, status, CL_TRUE, 0, (1 + groups) * 4, st, 0, NULL, NULL);
    const long bad = check_tiles(out, groups, rows, per);
    printf("%s (enc %u): enqueue %d finish %d, %u work-groups timed out, %ld of %u elements "
           "wrong",
           kname, enc, e, f, st[0], bad, groups * 8192);
    if (per == 2)
        printf(", (cluster rank, size) of work-groups 0-3: (%u %u) (%u %u) (%u %u) (%u %u)",
               st[1] & 255, st[1] >> 8, st[2] & 255, st[2] >> 8, st[3] & 255, st[3] >> 8,
               st[4] & 255, st[4] >> 8);
    const int ok = e == CL_SUCCESS && f == CL_SUCCESS && st[0] == 0 && bad == 0;
    printf(" -> %s\n", ok ? "RIGHT" : "FAILED");
    free(h);
    free(out);
    free(st);
    return !ok;
}

static int run_stream(cl_program pr, unsigned enc)
{
    cl_uint cus = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    cl_int e;
    cl_mem map = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 128, NULL, &e);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)cus * 6 * 128 * 4, NULL, &e);
    cl_kernel k = clCreateKernel(pr, "tma_stream", &e);
    const size_t spans[] = {32u << 20, 512u << 20}; /* in L2, and not */
    /* rows 256 bytes apart (contiguous, as bench-l2-stage reads) or 2048 (the map
     * reads 256 of each: K of one head at Hk 8) */
    for (int s = 0; s < 4; s++) {
        const cl_ulong row_bytes = s & 1 ? ROW_BYTES : COLS * 2;
        const size_t span = spans[s / 2];
        const cl_uint rows = (cl_uint)(span / row_bytes), ntiles = rows / TILE_ROWS,
                      iters = 400;
        cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, span, NULL, &e);
        const cl_uint one = 0x01010101u;
        clEnqueueFillBuffer(q, buf, &one, 4, 0, span, 0, NULL, NULL);
        if (!build_map(pr, map, buf, rows, row_bytes, enc))
            return 1;
        for (int pc = 1; pc <= 6; pc++) {
            clSetKernelArg(k, 0, sizeof map, &map);
            clSetKernelArg(k, 1, sizeof ntiles, &ntiles);
            clSetKernelArg(k, 2, sizeof iters, &iters);
            clSetKernelArg(k, 3, sizeof out, &out);
            const size_t lws = 128, gws = (size_t)cus * pc * lws;
            double best = 0;
            for (int r = 0; r <= 5; r++) {
                cl_event ev;
                e = clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, &ev);
                if (e != CL_SUCCESS || clWaitForEvents(1, &ev) != CL_SUCCESS) {
                    printf("stream: enqueue %d failed\n", e);
                    return 1;
                }
                cl_ulong t0, t1;
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
                clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
                clReleaseEvent(ev);
                const double gbs = (double)gws / lws * iters * 16384.0 / (double)(t1 - t0);
                if (r > 0 && gbs > best)
                    best = gbs;
            }
            cl_uint *res = calloc(gws, 4), late = 0;
            if (!res)
                return oom();
            clEnqueueReadBuffer(q, out, CL_TRUE, 0, gws * 4, res, 0, NULL, NULL);
            for (size_t i = 0; i < gws; i++)
                late += res[i] >> 31;
            free(res);
            printf("tma_stream 16 KiB x 2 in flight  span %4zu MiB, rows %4lu bytes apart  %d "
                   "work-groups per CU: %8.1f GB/s%s\n",
                   span >> 20, (unsigned long)row_bytes, pc, best,
                   late ? " (waits timed out)" : "");
        }
        clReleaseMemObject(buf);
    }
    return 0;
}

/* Static local arrays of several sizes: built? launched? right? */
static int run_lmem(void)
{
    static const char *lsrc =
        "__kernel __attribute__((reqd_work_group_size(128, 1, 1)))\n"
        "void big(__global uint *out)\n"
        "{\n"
        "  __local uint s[BYTES / 4];\n"
        "  const uint lid = get_local_id(0);\n"
        "  for (uint i = lid; i < BYTES / 4; i += 128) s[i] = i;\n"
        "  barrier(CLK_LOCAL_MEM_FENCE);\n"
        "  uint acc = 0;\n"
        "  for (uint i = lid; i < BYTES / 4; i += 128) acc += s[BYTES / 4 - 1 - i];\n"
        "  out[get_global_id(0)] = acc;\n"
        "}\n";
    static const int sizes[] = {49152 - 256, 49152, 49152 + 16, 65536, 102400, 163840, 196608,
                                225280, 231424, 232448};
    cl_int e;
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 264 * 128 * 4, NULL, &e);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char opts[64];
        snprintf(opts, sizeof opts, "-DBYTES=%d", sizes[i]);
        cl_program pr = clCreateProgramWithSource(ctx, 1, &lsrc, NULL, &e);
        cl_int b = clBuildProgram(pr, 1, &dev, opts, NULL, NULL), en = -1, f = -1;
        long bad = -1;
        if (b == CL_SUCCESS) {
            cl_kernel k = clCreateKernel(pr, "big", &e);
            clSetKernelArg(k, 0, sizeof out, &out);
            size_t lws = 128, gws = 264 * lws;
            en = clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, NULL);
            f = clFinish(q);
            if (en == CL_SUCCESS && f == CL_SUCCESS) {
                cl_uint *h = calloc(gws, 4);
                if (!h)
                    return oom();
                clEnqueueReadBuffer(q, out, CL_TRUE, 0, gws * 4, h, 0, NULL, NULL);
                bad = 0;
                for (size_t t = 0; t < gws; t++) {
                    cl_uint want = 0;
                    for (cl_uint j = (cl_uint)(t % 128); j < (cl_uint)sizes[i] / 4; j += 128)
                        want += (cl_uint)sizes[i] / 4 - 1 - j;
                    bad += h[t] != want;
                }
                free(h);
            }
            clReleaseKernel(k);
        }
        printf("static local memory %6d bytes: build %d, enqueue %d, finish %d, %ld wrong\n",
               sizes[i], b, en, f, bad);
        clReleaseProgram(pr);
        if (f != CL_SUCCESS && en == CL_SUCCESS)
            break; /* the context may be gone */
    }
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: probe-tma map|cluster|stream ENC, or probe-tma lmem\n");
        return 2;
    }
    const unsigned enc = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 1;
    char name[256] = "";
    dev = pick_device("NVIDIA", name, sizeof name);
    if (!dev) {
        printf("probe-tma: no NVIDIA device\n");
        return 77;
    }
    cl_int e;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &e);
    if (!strcmp(argv[1], "lmem"))
        return run_lmem();
    cl_program pr = build();
    if (!pr)
        return 1;
    if (!strcmp(argv[1], "map"))
        return run_tiles(pr, "tma_tile", enc, 1);
    if (!strcmp(argv[1], "cluster"))
        return run_tiles(pr, "tma_cluster", enc, 2);
    if (!strcmp(argv[1], "stream"))
        return run_stream(pr, enc);
    fprintf(stderr, "probe-tma: unknown mode %s\n", argv[1]);
    return 2;
}
