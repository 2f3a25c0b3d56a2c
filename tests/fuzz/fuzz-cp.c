/* The fuzz target's context-parallel entry points (SPEC 2.5): cp_plan,
 * cp_gather, cp_scatter. The chunk rule is written here from the spec, to
 * size the local buffers and to know which global rows a rank may write. */
#include "fuzz.h"

#include <stddef.h>
#include <string.h>

static const clvarlen_dtype all_dtypes[] = {
    CLVARLEN_DTYPE_F32, CLVARLEN_DTYPE_F16, CLVARLEN_DTYPE_BF16, CLVARLEN_DTYPE_F64,
    CLVARLEN_DTYPE_I32, CLVARLEN_DTYPE_I64, CLVARLEN_DTYPE_U8,
};

#define DONE(c, st) (fz_after_call((c), (st)), (st))

/* Chunk `chunk` of a document of length len split into 2W chunks: [*start, +*n). */
static void cp_chunk(int64_t len, int64_t world, int64_t chunk, int64_t *start, int64_t *n)
{
    int64_t nc = 2 * world, base = len / nc, rem = len % nc;
    *start = chunk * base + (chunk < rem ? chunk : rem);
    *n = base + (chunk < rem);
}

static int cu_valid(const int32_t *cu, int64_t n)
{
    if (!cu || n < 0 || cu[0] != 0)
        return 0;
    for (int64_t s = 0; s < n; s++)
        if (cu[s + 1] < cu[s])
            return 0;
    return 1;
}

/* This rank's local token count (valid cu, world >= 1, rank in range). */
static int64_t cp_local_tokens(const int32_t *cu, int64_t n, int64_t world, int64_t rank)
{
    int64_t total = 0;
    for (int64_t s = 0; s < n; s++) {
        int64_t st, a, b;
        cp_chunk((int64_t)cu[s + 1] - cu[s], world, rank, &st, &a);
        cp_chunk((int64_t)cu[s + 1] - cu[s], world, 2 * world - 1 - rank, &st, &b);
        total += a + b;
    }
    return total;
}

/* The shared arguments: cu_seqlens [n + 1] filled, world and rank; notes must-fail. */
static int32_t *cp_args(fz_call *c, int64_t *n, int32_t *world, int32_t *rank, int *valid)
{
    fz_reader *r = c->r;
    *n = fz_count(r, 8);
    *world = fz_count32(r, 4);
    *rank = fz_u8(r) < 220 ? (int32_t)(fz_u8(r) % (*world > 0 ? *world : 1)) : fz_count32(r, 4);
    fz_bad_size(c, *n < 0, "negative n");
    fz_must_fail(c, *world < 1 || *rank < 0 || *rank >= *world, "world or rank invalid");
    int32_t *cu = fz_buffer(c, "cu_seqlens", FZ_IN, *n >= 0 ? ((fz_i128)*n + 1) * 4 : 0, 32);
    fz_required(c, cu, 1, "NULL cu_seqlens");
    int64_t ncu = fz_n(c, cu, 4, (fz_i128)*n + 1) - 1;
    fz_fill_cu(r, cu, ncu, fz_count(r, 60));
    *valid = ncu == *n && cu_valid(cu, *n) && !c->must_fail;
    fz_must_fail(c, cu && !cu_valid(cu, ncu), "invalid cu_seqlens");
    return cu;
}

static clvarlen_status op_cp_plan(fz_call *c)
{
    fz_reader *r = c->r;
    int64_t n;
    int32_t world, rank;
    int valid;
    int32_t *cu = cp_args(c, &n, &world, &rank, &valid);
    int64_t local = valid ? cp_local_tokens(cu, n, world, rank) : 0;
    int64_t capacity = fz_u8(r) < 200 ? local + fz_u8(r) % 3 - (fz_u8(r) < 40) : fz_count(r, 40);
    fz_i128 cu_bytes = n >= 0 ? ((fz_i128)n + 1) * 4 : 0;
    clvarlen_cp_plan_out *plan = fz_buffer(c, "plan", FZ_INOUT, sizeof *plan, 64);
    int32_t *lcu = fz_buffer(c, "local_cu_seqlens", FZ_OUT, cu_bytes, 32);
    int32_t *head = fz_buffer(c, "head_cu", FZ_OUT, cu_bytes, 4);
    int32_t *tail = fz_buffer(c, "tail_cu", FZ_OUT, cu_bytes, 4);
    /* capacity only bounds the outputs: the harness allocates what can be written. */
    int64_t cap_rows = valid && local < capacity ? local : capacity;
    int32_t *gidx = fz_buffer(c, "global_index", FZ_OUT, (fz_i128)cap_rows * 4, 4);
    int32_t *posn = fz_buffer(c, "position", FZ_OUT, (fz_i128)cap_rows * 4, 4);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, plan, 1, "NULL plan");
    fz_required(c, lcu, 1, "NULL local_cu_seqlens");
    fz_must_fail(c, (gidx || posn) && capacity < 0, "negative capacity");
    fz_must_fail(c, (gidx || posn) && local > capacity, "local tokens above capacity");
    if (plan) {
        *plan = (clvarlen_cp_plan_out){
            .local_cu_seqlens = lcu, .head_cu = head, .tail_cu = tail, .global_index = gidx,
            .position = posn, .capacity = capacity, .local_tokens = -7, .max_head = -7,
            .max_tail = -7};
    }
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_cp_plan(c->ctx, cu, n, world, rank, plan);
    fz_allow(c, plan, offsetof(clvarlen_cp_plan_out, struct_size), sizeof plan->struct_size);
    fz_allow(c, plan, offsetof(clvarlen_cp_plan_out, local_tokens), sizeof plan->local_tokens);
    fz_allow(c, plan, offsetof(clvarlen_cp_plan_out, max_head), sizeof plan->max_head);
    fz_allow(c, plan, offsetof(clvarlen_cp_plan_out, max_tail), sizeof plan->max_tail);
    fz_allow(c, lcu, 0, cu_bytes);
    fz_allow(c, head, 0, cu_bytes);
    fz_allow(c, tail, 0, cu_bytes);
    fz_allow(c, gidx, 0, (fz_i128)local * 4);
    fz_allow(c, posn, 0, (fz_i128)local * 4);
    if (st == CLVARLEN_SUCCESS && plan && plan->local_tokens != local)
        fz_fail(c, "local_tokens %lld, the chunk rule gives %lld", (long long)plan->local_tokens,
                (long long)local);
    return DONE(c, st);
}

static clvarlen_status op_cp_gather(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, all_dtypes, 7);
    int64_t row = fz_count(r, 6), gstride = fz_stride(r, row), lstride = fz_stride(r, row);
    int64_t n;
    int32_t world, rank;
    int valid;
    int32_t *cu = cp_args(c, &n, &world, &rank, &valid);
    int64_t local = valid ? cp_local_tokens(cu, n, world, rank) : 0;
    int64_t capacity = fz_u8(r) < 200 ? local + fz_u8(r) % 3 - (fz_u8(r) < 40) : fz_count(r, 40);
    fz_must_fail(c, capacity < 0, "negative local_capacity");
    fz_must_fail(c, valid && local > capacity, "local tokens above capacity");
    int64_t grows = valid ? cu[n] : 0;
    void *global = fz_rows(c, "global_rows", FZ_IN, dt, row, grows, gstride, 32);
    int64_t cap_rows = valid && local < capacity ? local : capacity;
    void *lrows = fz_rows(c, "local_rows", FZ_OUT, dt, row, cap_rows, lstride, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, global, local > 0, "NULL global_rows");
    fz_required(c, lrows, local > 0, "NULL local_rows");
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_cp_gather(c->ctx, dt, row, global, gstride, cu, n, world, rank,
                                            lrows, lstride, capacity);
    fz_allow_tensor(c, lrows, 0, local, dt, row, lstride);
    return DONE(c, st);
}

static void allow_rank_rows(fz_call *c, void *global, const int32_t *cu, int64_t n,
                            int64_t world, int64_t rank, clvarlen_dtype dt, int64_t row,
                            int64_t stride)
{
    for (int64_t s = 0; cu && s < fz_n(c, cu, 4, (fz_i128)n + 1) - 1; s++) {
        int64_t len = (int64_t)cu[s + 1] - cu[s], start, cnt;
        cp_chunk(len, world, rank, &start, &cnt);
        fz_allow_tensor(c, global, cu[s] + start, cnt, dt, row, stride);
        cp_chunk(len, world, 2 * world - 1 - rank, &start, &cnt);
        fz_allow_tensor(c, global, cu[s] + start, cnt, dt, row, stride);
    }
}

static clvarlen_status op_cp_scatter(fz_call *c)
{
    fz_reader *r = c->r;
    clvarlen_dtype dt = fz_dtype(r, all_dtypes, 7);
    int64_t row = fz_count(r, 6), gstride = fz_stride(r, row), lstride = fz_stride(r, row);
    uint8_t mb = fz_u8(r);
    clvarlen_scatter_mode mode = (clvarlen_scatter_mode)(mb < 250 ? mb % 2 : mb % 2 ? -1 : 2);
    unsigned flags = fz_u8(r);
    flags = flags < 250 ? flags % 4 : flags;
    fz_must_fail(c, mode != CLVARLEN_SCATTER_OVERWRITE && mode != CLVARLEN_SCATTER_ACCUMULATE,
                 "unknown mode");
    fz_must_fail(c, mode == CLVARLEN_SCATTER_ACCUMULATE && dt != CLVARLEN_DTYPE_F32 &&
                    dt != CLVARLEN_DTYPE_F16 && dt != CLVARLEN_DTYPE_BF16 &&
                    dt != CLVARLEN_DTYPE_I32, "accumulate of a dtype it does not take");
    int64_t n;
    int32_t world, rank;
    int valid;
    int32_t *cu = cp_args(c, &n, &world, &rank, &valid);
    /* No capacity argument: the local rows are exactly this rank's tokens. */
    int64_t local = valid ? cp_local_tokens(cu, n, world, rank) : fz_count(r, 8);
    int64_t grows = valid ? cu[n] : 0;
    void *lrows = fz_rows(c, "local_rows", FZ_IN, dt, row, local, lstride, 32);
    void *global = fz_rows(c, "global_rows", FZ_INOUT, dt, row, grows, gstride, 32);
    if (c->skip)
        return FZ_NOT_CALLED;
    fz_required(c, global, grows > 0, "NULL global_rows");
    fz_required(c, lrows, valid && local > 0, "NULL local_rows");
    fz_before_call(c, 1);
    clvarlen_status st = clvarlen_cp_scatter(c->ctx, dt, row, lrows, lstride, cu, n, world, rank,
                                             global, gstride, mode, flags);
    /* ZERO_REST zeroes the other rows in either mode (as in scatter_rows). */
    if (flags & CLVARLEN_SCATTER_ZERO_REST)
        fz_allow_tensor(c, global, 0, grows, dt, row, gstride);
    else if (world > 0 && rank >= 0 && rank < world)
        allow_rank_rows(c, global, cu, n, world, rank, dt, row, gstride);
    return DONE(c, st);
}

const fz_op fz_cp_ops[] = {
    {"cp_plan", op_cp_plan},
    {"cp_gather", op_cp_gather},
    {"cp_scatter", op_cp_scatter},
};
const int fz_n_cp_ops = (int)(sizeof fz_cp_ops / sizeof fz_cp_ops[0]);
