/* libclvarlen-mpi: context-parallel varlen attention over an MPI communicator
 * (include/clvarlen/clvarlen-mpi.h). Built on the public API of libclvarlen
 * only (cp_plan, scatter/gather_rows, attention forward/backward, their
 * cl_mem twins), plus the shared f16/bf16 conversions (lib/core/half.c).
 *
 * The exchange (docs/ARCHITECTURE.md, "CP over MPI"):
 *   forward:  local K|V rows -> MPI_Allgatherv (rank order) -> scatter_rows
 *             by the permutation `perm` (rank order -> global order) ->
 *             attention(local q, global K/V, q_pos = plan positions).
 *   backward: the same gather, attention backward (dk/dv of every key, f32)
 *             -> gather_rows by perm (global -> rank order) ->
 *             MPI_Reduce_scatter (f32 sum, each rank its own rows).
 * K and V travel together as one row of heads_kv * (head_dim + head_dim_v)
 * elements, so one collective moves both and attention reads them as
 * strided views.
 */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif
#include <clvarlen/clvarlen-mpi.h>

#include "core/half.h"

/* ---------------------------------------------------------------- errors */

static _Thread_local char g_error[1024];

static clvarlen_status fail(clvarlen_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static clvarlen_status fail(clvarlen_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return st;
}

const char *clvarlen_mpi_last_error(void)
{
    return g_error;
}

int clvarlen_mpi_version(void)
{
    return CLVARLEN_VERSION;
}

/* A failed core call: its message, prefixed with what it was. */
static clvarlen_status fail_core(clvarlen_status st, clvarlen_context *ctx, const char *what)
{
    return fail(st, "%s: %s (%s)", what, clvarlen_last_error(ctx), clvarlen_status_name(st));
}

static clvarlen_status fail_mpi(int err, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", err);
    return fail(CLVARLEN_ERROR_INTERNAL, "%s failed: %s", what, msg);
}

/* ---------------------------------------------------------------- the handle */

struct clvarlen_mpi_cp {
    clvarlen_context *ctx;
    MPI_Comm comm; /* our duplicate */
    MPI_Datatype kv_row;    /* one K|V row in dtype */
    int world, rank;
    clvarlen_attention_params p; /* n_seqs, totals and max lengths set for this rank */
    int64_t n, total;            /* documents; tokens of the whole batch */
    int32_t *cu;                 /* [n + 1] the documents */
    int32_t *local_cu;           /* [n + 1] this rank's plan */
    int32_t *position;           /* [local] */
    int32_t *perm;               /* [total]: rank-ordered row -> global row */
    int *counts, *displs;        /* [world] rows per rank and their start */
    int *counts_f32;             /* [world] f32 elements per rank (reduce-scatter) */
    int64_t local;               /* this rank's tokens */
    int64_t row_k, row_v, row_kv; /* elements: heads_kv * head_dim, * head_dim_v, their sum */
    int64_t k_su, v_su;          /* the caller's k and v token strides (elements) */
    size_t es;                   /* dtype size */
    /* host work space (host entry points) */
    char *kv_loc, *kv_all, *kv_glob;
    float *dkv_glob, *dkv_rank, *dkv_loc, *dq32;
    clvarlen_mpi_cp_stats stats;
#if CLVARLEN_HAVE_OPENCL
    /* device work space (cl_mem entry points) */
    cl_context cl_ctx;
    cl_command_queue queue;
    cl_mem d_kv_all, d_kv_glob, d_perm, d_cu, d_local_cu, d_pos;
    cl_mem d_dkv_glob, d_dkv_rank, d_dq32;
    cl_mem h_kv_loc, h_kv_all, h_dkv_rank, h_dkv_loc, h_dq32; /* pinned staging */
    void *m_kv_loc, *m_kv_all, *m_dkv_rank, *m_dkv_loc, *m_dq32; /* their mappings */
#endif
};

/* ---------------------------------------------------------------- collective agreement */

/* Every rank's status of the local checks, agreed before any data moves: the
 * worst (largest) status wins, with the lowest rank reporting it. A rank that
 * failed keeps its own message; the others get one naming that rank. */
static clvarlen_status agree(MPI_Comm comm, int rank, clvarlen_status st)
{
    int in[2] = {st == CLVARLEN_SUCCESS ? 0 : 1, st == CLVARLEN_SUCCESS ? INT_MAX : rank};
    int mine = (int)st;
    int out_fail[2];
    int err = MPI_Allreduce(in, out_fail, 1, MPI_2INT, MPI_MAXLOC, comm);
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allreduce (agreeing on the checks)");
    if (out_fail[0] == 0)
        return CLVARLEN_SUCCESS;
    /* The failing rank with the lowest number broadcasts its status. */
    int who = 0, first = st != CLVARLEN_SUCCESS ? rank : INT_MAX;
    err = MPI_Allreduce(&first, &who, 1, MPI_INT, MPI_MIN, comm);
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allreduce (agreeing on the checks)");
    err = MPI_Bcast(&mine, 1, MPI_INT, who, comm);
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Bcast (agreeing on the checks)");
    if (st != CLVARLEN_SUCCESS)
        return st;
    return fail((clvarlen_status)mine, "rank %d of the CP group failed (%s); nothing was exchanged",
                who, clvarlen_status_name((clvarlen_status)mine));
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A digest of what every rank must agree on: the documents and the attention's
 * shape and options (not the local strides, which may differ by rank). */
static uint64_t digest(const clvarlen_attention_params *p, const int32_t *cu, int64_t n)
{
    uint64_t h = 14695981039346656037ull;
    int32_t f[] = {(int32_t)p->dtype, p->heads_q, p->heads_kv, p->head_dim, p->head_dim_v,
                   p->causal != 0, p->window_left, p->window_right};
    h = fnv(h, f, sizeof f);
    float g[] = {p->scale, p->softcap, p->dropout_p};
    h = fnv(h, g, sizeof g);
    uint64_t d[] = {p->dropout_seed, p->dropout_offset, (uint64_t)n};
    h = fnv(h, d, sizeof d);
    return fnv(h, cu, sizeof(int32_t) * (size_t)(n + 1));
}

/* ---------------------------------------------------------------- local checks */

static bool head_dim_ok(int32_t d)
{
    return d >= 16 && d <= 256 && d % 16 == 0;
}

static clvarlen_status check_params(const clvarlen_attention_params *p)
{
    if (p->struct_size < CLVARLEN_ATTENTION_PARAMS_MIN_SIZE)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "params->struct_size %u is smaller than the first released size (init it)",
                    p->struct_size);
    if (p->dtype != CLVARLEN_DTYPE_F32 && p->dtype != CLVARLEN_DTYPE_F16 &&
        p->dtype != CLVARLEN_DTYPE_BF16)
        return fail(CLVARLEN_ERROR_UNSUPPORTED, "dtype %s: CP attention takes f32, f16 or bf16",
                    clvarlen_dtype_name(p->dtype));
    if (p->heads_q <= 0 || p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "heads_q %d, heads_kv %d: both > 0 with heads_q %% heads_kv == 0", p->heads_q,
                    p->heads_kv);
    int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    if (p->head_dim < 0 || dv < 0)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "head_dim %d, head_dim_v %d: negative",
                    p->head_dim, p->head_dim_v);
    if (!head_dim_ok(p->head_dim) || !head_dim_ok(dv))
        return fail(CLVARLEN_ERROR_UNSUPPORTED,
                    "head_dim %d, head_dim_v %d: each a multiple of 16 in [16, 256]", p->head_dim,
                    dv);
    if (!isfinite(p->scale) || p->scale < 0.0f)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "scale %g: finite and >= 0 (0 = 1/sqrt(D))",
                    (double)p->scale);
    if (p->window_left < -1 || p->window_right < -1)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "window (%d, %d): each >= -1",
                    p->window_left, p->window_right);
    if (!isfinite(p->softcap) || p->softcap < 0.0f)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "softcap %g: finite and >= 0",
                    (double)p->softcap);
    if (p->struct_size >= offsetof(clvarlen_attention_params, dropout_offset) + sizeof(uint64_t) &&
        !(p->dropout_p >= 0.0f && p->dropout_p < 1.0f))
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "dropout_p %g: in [0, 1)",
                    (double)p->dropout_p);
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * dv;
    const int64_t row_k = (int64_t)p->heads_kv * p->head_dim, row_v = (int64_t)p->heads_kv * dv;
    if ((p->q_stride && p->q_stride < row_q) || (p->o_stride && p->o_stride < row_o) ||
        (p->k_stride && p->k_stride < row_k) || (p->v_stride && p->v_stride < row_v) ||
        p->q_stride < 0 || p->k_stride < 0 || p->v_stride < 0 || p->o_stride < 0)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "token strides (q %lld, k %lld, v %lld, o %lld): 0 or at least the row",
                    (long long)p->q_stride, (long long)p->k_stride, (long long)p->v_stride,
                    (long long)p->o_stride);
    return CLVARLEN_SUCCESS;
}

static clvarlen_status check_cu(const int32_t *cu, int64_t n)
{
    if (cu[0] != 0)
        return fail(CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cu_seqlens[0] = %d, not 0", cu[0]);
    for (int64_t s = 0; s < n; s++)
        if (cu[s + 1] < cu[s])
            return fail(CLVARLEN_ERROR_INVALID_CU_SEQLENS,
                        "cu_seqlens decreases at %lld (%d -> %d)", (long long)s, cu[s],
                        cu[s + 1]);
    return CLVARLEN_SUCCESS;
}

/* ---------------------------------------------------------------- create / destroy */

static void free_host_ws(clvarlen_mpi_cp *cp)
{
    free(cp->kv_loc);
    free(cp->kv_all);
    free(cp->kv_glob);
    free(cp->dkv_glob);
    free(cp->dkv_rank);
    free(cp->dkv_loc);
    free(cp->dq32);
}

#if CLVARLEN_HAVE_OPENCL
static void release_mem(cl_mem *m)
{
    if (*m)
        clReleaseMemObject(*m);
    *m = NULL;
}
static void unmap_pinned(clvarlen_mpi_cp *cp, cl_mem *m, void **ptr)
{
    if (*m && *ptr)
        clEnqueueUnmapMemObject(cp->queue, *m, *ptr, 0, NULL, NULL);
    *ptr = NULL;
    release_mem(m);
}
static void free_cl_ws(clvarlen_mpi_cp *cp)
{
    if (!cp->queue)
        return;
    unmap_pinned(cp, &cp->h_kv_loc, &cp->m_kv_loc);
    unmap_pinned(cp, &cp->h_kv_all, &cp->m_kv_all);
    unmap_pinned(cp, &cp->h_dkv_rank, &cp->m_dkv_rank);
    unmap_pinned(cp, &cp->h_dkv_loc, &cp->m_dkv_loc);
    unmap_pinned(cp, &cp->h_dq32, &cp->m_dq32);
    clFinish(cp->queue);
    cl_mem *d[] = {&cp->d_kv_all, &cp->d_kv_glob, &cp->d_perm, &cp->d_cu, &cp->d_local_cu,
                   &cp->d_pos, &cp->d_dkv_glob, &cp->d_dkv_rank, &cp->d_dq32};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        release_mem(d[i]);
}
#endif

static void free_handle(clvarlen_mpi_cp *cp)
{
    if (!cp)
        return;
    free_host_ws(cp);
#if CLVARLEN_HAVE_OPENCL
    free_cl_ws(cp);
#endif
    free(cp->cu);
    free(cp->local_cu);
    free(cp->position);
    free(cp->perm);
    free(cp->counts);
    free(cp->displs);
    free(cp->counts_f32);
    free(cp);
}

/* Everything a rank can compute alone: the plans of every rank (for the
 * permutation and the counts) and its own positions. */
static clvarlen_status build_local(clvarlen_mpi_cp *cp, const clvarlen_attention_params *params,
                                   const int32_t *cu_seqlens, int64_t n)
{
    clvarlen_status st = check_params(params);
    if (st)
        return st;
    if (n < 0 || n > INT32_MAX - 1)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "n %lld: in [0, 2^31 - 1)", (long long)n);
    if ((st = check_cu(cu_seqlens, n)))
        return st;
    cp->n = n;
    cp->total = cu_seqlens[n];
    cp->p = *params;
    cp->p.struct_size = sizeof(clvarlen_attention_params) < params->struct_size
                            ? (uint32_t)sizeof(clvarlen_attention_params)
                            : params->struct_size;
    if (cp->p.head_dim_v == 0)
        cp->p.head_dim_v = cp->p.head_dim;
    cp->es = clvarlen_dtype_size(params->dtype);
    cp->row_k = (int64_t)params->heads_kv * params->head_dim;
    cp->row_v = (int64_t)params->heads_kv * cp->p.head_dim_v;
    cp->row_kv = cp->row_k + cp->row_v;
    /* One K|V row in bytes is an MPI count; every rank's rows too (counted
     * in rows), and its f32 gradient elements (the reduce-scatter counts). */
    if ((uint64_t)cp->row_kv * 4u > (uint64_t)INT_MAX)
        return fail(CLVARLEN_ERROR_OVERFLOW, "a K|V row of %lld elements is beyond one MPI count",
                    (long long)cp->row_kv);
    const size_t nw = (size_t)cp->world;
    cp->cu = malloc(sizeof(int32_t) * (size_t)(n + 1));
    cp->local_cu = malloc(sizeof(int32_t) * (size_t)(n + 1));
    cp->perm = malloc(sizeof(int32_t) * (size_t)(cp->total + 1));
    cp->counts = malloc(sizeof(int) * nw);
    cp->displs = malloc(sizeof(int) * nw);
    cp->counts_f32 = malloc(sizeof(int) * nw);
    int32_t *tmp_cu = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!cp->cu || !cp->local_cu || !cp->perm || !cp->counts || !cp->displs || !cp->counts_f32 ||
        !tmp_cu) {
        free(tmp_cu);
        return fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
    }
    memcpy(cp->cu, cu_seqlens, sizeof(int32_t) * (size_t)(n + 1));
    int64_t at = 0;
    for (int r = 0; r < cp->world; r++) {
        clvarlen_cp_plan_out plan;
        memset(&plan, 0, sizeof plan);
        plan.local_cu_seqlens = r == cp->rank ? cp->local_cu : tmp_cu;
        plan.global_index = cp->perm + at;
        plan.capacity = cp->total - at;
        st = clvarlen_cp_plan(cp->ctx, cu_seqlens, n, cp->world, r, &plan);
        if (st) {
            free(tmp_cu);
            return fail_core(st, cp->ctx, "clvarlen_cp_plan");
        }
        if (plan.local_tokens > INT_MAX ||
            (uint64_t)plan.local_tokens * (uint64_t)cp->row_kv > (uint64_t)INT_MAX) {
            free(tmp_cu);
            return fail(CLVARLEN_ERROR_OVERFLOW,
                        "rank %d holds %lld tokens of %lld elements: beyond one MPI count", r,
                        (long long)plan.local_tokens, (long long)cp->row_kv);
        }
        cp->counts[r] = (int)plan.local_tokens;
        cp->displs[r] = (int)at;
        cp->counts_f32[r] = (int)(plan.local_tokens * cp->row_kv);
        if (r == cp->rank)
            cp->local = plan.local_tokens;
        at += plan.local_tokens;
    }
    free(tmp_cu);
    cp->position = malloc(sizeof(int32_t) * (size_t)(cp->local + 1));
    if (!cp->position)
        return fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
    clvarlen_cp_plan_out plan;
    memset(&plan, 0, sizeof plan);
    plan.local_cu_seqlens = cp->local_cu;
    plan.position = cp->position;
    plan.capacity = cp->local;
    if ((st = clvarlen_cp_plan(cp->ctx, cu_seqlens, n, cp->world, cp->rank, &plan)))
        return fail_core(st, cp->ctx, "clvarlen_cp_plan");
    int32_t max_q = 0, max_k = 0;
    for (int64_t s = 0; s < n; s++) {
        if (cp->local_cu[s + 1] - cp->local_cu[s] > max_q)
            max_q = cp->local_cu[s + 1] - cp->local_cu[s];
        if (cu_seqlens[s + 1] - cu_seqlens[s] > max_k)
            max_k = cu_seqlens[s + 1] - cu_seqlens[s];
    }
    cp->p.n_seqs = n;
    cp->p.total_q = cp->local;
    cp->p.total_k = cp->total;
    cp->p.max_seqlen_q = max_q;
    cp->p.max_seqlen_k = max_k;
    cp->k_su = params->k_stride ? params->k_stride : cp->row_k;
    cp->v_su = params->v_stride ? params->v_stride : cp->row_v;
    /* The attention reads K and V as views into the K|V rows. */
    cp->p.k_stride = cp->row_kv;
    cp->p.v_stride = cp->row_kv;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_mpi_cp_create(clvarlen_context *context, MPI_Comm comm,
                                       const clvarlen_attention_params *params,
                                       const int32_t *cu_seqlens, int64_t n, clvarlen_mpi_cp **out)
{
    /* Without a communicator there is no one to agree with: plain errors. */
    if (comm == MPI_COMM_NULL)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
    int inter = 0, world = 0, rank = 0, err;
    if ((err = MPI_Comm_test_inter(comm, &inter)) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Comm_test_inter");
    if (inter)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "comm is an intercommunicator");
    if ((err = MPI_Comm_size(comm, &world)) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Comm_size");
    if ((err = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Comm_rank");

    clvarlen_status st = CLVARLEN_SUCCESS;
    clvarlen_mpi_cp *cp = NULL;
    if (!context || !params || !cu_seqlens || !out)
        st = fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s",
                  !context ? "context" : !params ? "params" : !cu_seqlens ? "cu_seqlens" : "cp");
    else if (!(cp = calloc(1, sizeof *cp)))
        st = fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
    if (!st) {
        cp->ctx = context;
        cp->world = world;
        cp->rank = rank;
        cp->comm = MPI_COMM_NULL;
        cp->kv_row = MPI_DATATYPE_NULL;
        st = build_local(cp, params, cu_seqlens, n);
    }
    if ((st = agree(comm, rank, st))) {
        free_handle(cp);
        return st;
    }
    /* Every rank's checks passed: now the documents and options must match. */
    uint64_t h = digest(&cp->p, cp->cu, cp->n), lo = 0, hi = 0;
    if ((err = MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, comm)) != MPI_SUCCESS ||
        (err = MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, comm)) != MPI_SUCCESS) {
        free_handle(cp);
        return fail_mpi(err, "MPI_Allreduce (comparing the ranks' plans)");
    }
    if (lo != hi) {
        free_handle(cp);
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "the ranks of the CP group were given different cu_seqlens or attention "
                    "params (dtype, heads, head dims, scale, masks, softcap, dropout): every "
                    "rank must pass the same");
    }
    if ((err = MPI_Comm_dup(comm, &cp->comm)) != MPI_SUCCESS) {
        cp->comm = MPI_COMM_NULL;
        free_handle(cp);
        return fail_mpi(err, "MPI_Comm_dup");
    }
    if ((err = MPI_Type_contiguous((int)((size_t)cp->row_kv * cp->es), MPI_BYTE, &cp->kv_row)) !=
            MPI_SUCCESS ||
        (err = MPI_Type_commit(&cp->kv_row)) != MPI_SUCCESS) {
        MPI_Comm_free(&cp->comm);
        free_handle(cp);
        return fail_mpi(err, "MPI_Type_contiguous");
    }
    *out = cp;
    return CLVARLEN_SUCCESS;
}

void clvarlen_mpi_cp_destroy(clvarlen_mpi_cp *cp)
{
    if (!cp)
        return;
    if (cp->kv_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&cp->kv_row);
    if (cp->comm != MPI_COMM_NULL)
        MPI_Comm_free(&cp->comm);
    free_handle(cp);
}

clvarlen_status clvarlen_mpi_cp_local_tokens(const clvarlen_mpi_cp *cp, int64_t *local_tokens)
{
    if (!cp || !local_tokens)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s", !cp ? "cp" : "local_tokens");
    *local_tokens = cp->local;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_mpi_cp_plan(const clvarlen_mpi_cp *cp, int32_t *local_cu_seqlens,
                                     int32_t *position)
{
    if (!cp)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    if (local_cu_seqlens)
        memcpy(local_cu_seqlens, cp->local_cu, sizeof(int32_t) * (size_t)(cp->n + 1));
    if (position && cp->local)
        memcpy(position, cp->position, sizeof(int32_t) * (size_t)cp->local);
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_mpi_cp_get_stats(const clvarlen_mpi_cp *cp, clvarlen_mpi_cp_stats *stats)
{
    if (!cp || !stats)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s", !cp ? "cp" : "stats");
    if (stats->struct_size < sizeof(clvarlen_mpi_cp_stats))
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "stats->struct_size %u: set it to %zu",
                    stats->struct_size, sizeof(clvarlen_mpi_cp_stats));
    *stats = cp->stats;
    stats->struct_size = (uint32_t)sizeof(clvarlen_mpi_cp_stats);
    return CLVARLEN_SUCCESS;
}

/* ---------------------------------------------------------------- shared steps */

static void stats_begin(clvarlen_mpi_cp *cp, double *t0)
{
    memset(&cp->stats, 0, sizeof cp->stats);
    cp->stats.struct_size = (uint32_t)sizeof cp->stats;
    *t0 = MPI_Wtime();
}

static void stats_end(clvarlen_mpi_cp *cp, double t0)
{
    cp->stats.total_seconds = MPI_Wtime() - t0;
    cp->stats.compute_seconds = cp->stats.total_seconds - cp->stats.exchange_seconds;
}

/* The bytes of the all-gather of K|V rows (this rank's shard to each peer,
 * every peer's shard to this rank). */
static void count_allgather(clvarlen_mpi_cp *cp)
{
    const int64_t rb = cp->row_kv * (int64_t)cp->es;
    cp->stats.bytes_sent += cp->local * rb * (cp->world - 1);
    cp->stats.bytes_received += (cp->total - cp->local) * rb;
}

/* The reduce-scatter of the f32 dk|dv rows: every other rank's share out,
 * the others' contributions to this rank's rows in. */
static void count_reduce_scatter(clvarlen_mpi_cp *cp)
{
    const int64_t rb = cp->row_kv * 4;
    cp->stats.bytes_sent += (cp->total - cp->local) * rb;
    cp->stats.bytes_received += cp->local * rb * (cp->world - 1);
}

static clvarlen_status allgather_kv(clvarlen_mpi_cp *cp, const void *loc, void *all)
{
    double t = MPI_Wtime();
    int err = MPI_Allgatherv(loc, cp->counts[cp->rank], cp->kv_row, all, cp->counts, cp->displs, cp->kv_row, cp->comm);
    cp->stats.exchange_seconds += MPI_Wtime() - t;
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allgatherv (K/V shards)");
    count_allgather(cp);
    return CLVARLEN_SUCCESS;
}

static clvarlen_status reduce_scatter_dkv(clvarlen_mpi_cp *cp, const float *rank_order, float *loc)
{
    double t = MPI_Wtime();
    int err = MPI_Reduce_scatter(rank_order, loc, cp->counts_f32, MPI_FLOAT, MPI_SUM, cp->comm);
    cp->stats.exchange_seconds += MPI_Wtime() - t;
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Reduce_scatter (dk/dv)");
    count_reduce_scatter(cp);
    return CLVARLEN_SUCCESS;
}

/* After the local computation: every rank learns whether any failed. */
static clvarlen_status agree_after(clvarlen_mpi_cp *cp, clvarlen_status st)
{
    return agree(cp->comm, cp->rank, st);
}

static void *alloc_ws(void **slot, size_t bytes, clvarlen_status *st)
{
    if (!*slot && !*st) {
        *slot = malloc(bytes ? bytes : 1);
        if (!*slot)
            *st = fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP work space: out of host memory (%zu bytes)",
                       bytes);
    }
    return *slot;
}

/* f32 rows -> rows of `dtype` (f32: a copy), each `elems` wide, strided. */
static void store_rows(const float *src, int64_t src_stride, int64_t rows, int64_t elems,
                       clvarlen_dtype dtype, void *dst, int64_t dst_stride)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + r * src_stride;
        if (dtype == CLVARLEN_DTYPE_F32) {
            memcpy((float *)dst + r * dst_stride, s, sizeof(float) * (size_t)elems);
        } else if (dtype == CLVARLEN_DTYPE_F16) {
            uint16_t *d = (uint16_t *)dst + r * dst_stride;
            for (int64_t i = 0; i < elems; i++)
                d[i] = cv_float_to_half(s[i]);
        } else {
            uint16_t *d = (uint16_t *)dst + r * dst_stride;
            for (int64_t i = 0; i < elems; i++)
                d[i] = cv_float_to_bf16(s[i]);
        }
    }
}

/* ---------------------------------------------------------------- host entry points */

/* This rank's K and V rows, packed as K|V rows, gathered from every rank and
 * put in global order in cp->kv_glob. */
static clvarlen_status gather_kv_host(clvarlen_mpi_cp *cp, const void *k, const void *v)
{
    const size_t es = cp->es, rb = (size_t)cp->row_kv * es;
    for (int64_t t = 0; t < cp->local; t++) {
        memcpy(cp->kv_loc + (size_t)t * rb, (const char *)k + (size_t)(t * cp->k_su) * es,
               (size_t)cp->row_k * es);
        memcpy(cp->kv_loc + (size_t)t * rb + (size_t)cp->row_k * es,
               (const char *)v + (size_t)(t * cp->v_su) * es, (size_t)cp->row_v * es);
    }
    clvarlen_status st = allgather_kv(cp, cp->kv_loc, cp->kv_all);
    if (st)
        return st;
    if (!cp->total)
        return CLVARLEN_SUCCESS;
    st = clvarlen_scatter_rows(cp->ctx, cp->p.dtype, cp->row_kv, cp->kv_all, 0, cp->perm,
                               cp->total, cp->kv_glob, cp->total, 0, CLVARLEN_SCATTER_OVERWRITE,
                               0);
    return st ? fail_core(st, cp->ctx, "putting K/V in global order (clvarlen_scatter_rows)") : st;
}

/* Byte range of a strided tensor: rows of `row` elements every `stride`. */
typedef struct span {
    const char *lo, *hi;
} span;

static span range(const void *p, int64_t rows, int64_t stride, int64_t row, size_t es)
{
    span s = {p, p};
    if (p && rows > 0)
        s.hi = (const char *)p + ((size_t)((rows - 1) * stride + row)) * es;
    return s;
}

static bool overlaps(span a, span b)
{
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

static int64_t or_row(int64_t stride, int64_t row)
{
    return stride ? stride : row;
}

/* The local checks of a forward call on host memory. */
static clvarlen_status check_forward_host(clvarlen_mpi_cp *cp, const void *q, const void *k,
                                          const void *v, const void *o, const float *lse)
{
    if (!cp->local)
        return CLVARLEN_SUCCESS; /* an empty rank reads and writes nothing */
    if (!q || !k || !v || !o)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s (this rank holds %lld tokens)",
                    !q ? "q" : !k ? "k" : !v ? "v" : "o", (long long)cp->local);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    span so = range(o, cp->local, or_row(p->o_stride, row_o), row_o, cp->es);
    span sl = range(lse, p->heads_q, cp->local, cp->local, 4);
    span in[] = {range(q, cp->local, or_row(p->q_stride, row_q), row_q, cp->es),
                 range(k, cp->local, cp->k_su, cp->row_k, cp->es),
                 range(v, cp->local, cp->v_su, cp->row_v, cp->es)};
    for (size_t i = 0; i < 3; i++)
        if (overlaps(so, in[i]) || overlaps(sl, in[i]))
            return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s overlaps %s",
                        overlaps(so, in[i]) ? "o" : "lse", i == 0 ? "q" : i == 1 ? "k" : "v");
    if (overlaps(so, sl))
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "o overlaps lse");
    return CLVARLEN_SUCCESS;
}

/* The host buffers of the gather, and of the forward's outputs. */
static clvarlen_status host_ws(clvarlen_mpi_cp *cp, bool backward)
{
    clvarlen_status st = CLVARLEN_SUCCESS;
    const size_t rb = (size_t)cp->row_kv * cp->es, rb32 = (size_t)cp->row_kv * 4;
    const size_t row_q = (size_t)cp->p.heads_q * (size_t)cp->p.head_dim;
    const size_t row_o = (size_t)cp->p.heads_q * (size_t)cp->p.head_dim_v;
    alloc_ws((void **)&cp->kv_loc, (size_t)cp->local * rb, &st);
    alloc_ws((void **)&cp->kv_all, (size_t)cp->total * rb, &st);
    alloc_ws((void **)&cp->kv_glob, (size_t)cp->total * rb, &st);
    if (!backward) {
        /* o and lse of this rank before the outcome is agreed (dq32's slot) */
        alloc_ws((void **)&cp->dq32,
                 (size_t)cp->local * (row_o * cp->es + 4 * (size_t)cp->p.heads_q) +
                     (size_t)cp->local * row_q * 4,
                 &st);
        return st;
    }
    alloc_ws((void **)&cp->dkv_glob, (size_t)cp->total * rb32, &st);
    alloc_ws((void **)&cp->dkv_rank, (size_t)cp->total * rb32, &st);
    alloc_ws((void **)&cp->dkv_loc, (size_t)cp->local * rb32, &st);
    alloc_ws((void **)&cp->dq32,
             (size_t)cp->local * (row_o * cp->es + 4 * (size_t)cp->p.heads_q) +
                 (size_t)cp->local * row_q * 4,
             &st);
    return st;
}

clvarlen_status clvarlen_mpi_cp_forward(clvarlen_mpi_cp *cp, const void *q, const void *k,
                                        const void *v, void *o, float *lse)
{
    if (!cp)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    stats_begin(cp, &t0);
    clvarlen_status st = check_forward_host(cp, q, k, v, o, lse);
    if (!st)
        st = host_ws(cp, false);
    if ((st = agree(cp->comm, cp->rank, st)))
        return st;
    st = gather_kv_host(cp, k, v);
    /* o and lse land in work space first: nothing is written unless every rank succeeds */
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    char *o_tmp = (char *)cp->dq32;
    float *lse_tmp = (float *)(o_tmp + (size_t)(cp->local * row_o) * cp->es);
    if (!st && cp->local) {
        clvarlen_attention_params pl = *p;
        pl.o_stride = 0;
        st = clvarlen_attention_forward(cp->ctx, &pl, q, cp->kv_glob,
                                        cp->kv_glob + (size_t)cp->row_k * cp->es, cp->local_cu,
                                        cp->cu, cp->position, o_tmp, lse_tmp);
        if (st)
            st = fail_core(st, cp->ctx, "attention forward of this rank's queries");
    }
    st = agree_after(cp, st);
    if (!st && cp->local) {
        const int64_t os = or_row(p->o_stride, row_o);
        for (int64_t t = 0; t < cp->local; t++)
            memcpy((char *)o + (size_t)(t * os) * cp->es, o_tmp + (size_t)(t * row_o) * cp->es,
                   (size_t)row_o * cp->es);
        if (lse)
            memcpy(lse, lse_tmp, sizeof(float) * (size_t)(cp->local * p->heads_q));
    }
    stats_end(cp, t0);
    return st;
}

/* bwd (or the defaults) as this library reads it; the strides it gives to the
 * core backward are set by the caller of this. */
static clvarlen_status read_bwd(const clvarlen_attention_bwd_params *bwd,
                                clvarlen_attention_bwd_params *g)
{
    clvarlen_attention_bwd_params_init(g);
    if (!bwd)
        return CLVARLEN_SUCCESS;
    if (bwd->struct_size < CLVARLEN_ATTENTION_BWD_PARAMS_MIN_SIZE)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "bwd->struct_size %u is smaller than the first released size (init it)",
                    bwd->struct_size);
    size_t n = bwd->struct_size < sizeof *g ? bwd->struct_size : sizeof *g;
    memcpy(g, bwd, n);
    g->struct_size = (uint32_t)sizeof *g;
    return CLVARLEN_SUCCESS;
}

static clvarlen_status check_bwd_strides(const clvarlen_mpi_cp *cp,
                                         const clvarlen_attention_bwd_params *g)
{
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    if (g->do_stride < 0 || g->dq_stride < 0 || g->dk_stride < 0 || g->dv_stride < 0 ||
        (g->do_stride && g->do_stride < row_o) || (g->dq_stride && g->dq_stride < row_q) ||
        (g->dk_stride && g->dk_stride < cp->row_k) || (g->dv_stride && g->dv_stride < cp->row_v))
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "bwd strides (do %lld, dq %lld, dk %lld, dv %lld): 0 or at least the row",
                    (long long)g->do_stride, (long long)g->dq_stride, (long long)g->dk_stride,
                    (long long)g->dv_stride);
    return CLVARLEN_SUCCESS;
}

static clvarlen_status check_backward_host(clvarlen_mpi_cp *cp,
                                           const clvarlen_attention_bwd_params *g, const void *q,
                                           const void *k, const void *v, const void *o,
                                           const void *dout, const float *lse, void *dq, void *dk,
                                           void *dv)
{
    clvarlen_status st = check_bwd_strides(cp, g);
    if (st || !cp->local)
        return st;
    const void *need[] = {q, k, v, o, dout, lse, dq, dk, dv};
    const char *names[] = {"q", "k", "v", "o", "do", "lse", "dq", "dk", "dv"};
    for (size_t i = 0; i < 9; i++)
        if (!need[i])
            return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s (this rank holds %lld tokens)",
                        names[i], (long long)cp->local);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    const size_t ges = g->grad_f32 ? 4 : cp->es;
    span ins[] = {range(q, cp->local, or_row(p->q_stride, row_q), row_q, cp->es),
                  range(k, cp->local, cp->k_su, cp->row_k, cp->es),
                  range(v, cp->local, cp->v_su, cp->row_v, cp->es),
                  range(o, cp->local, or_row(p->o_stride, row_o), row_o, cp->es),
                  range(dout, cp->local, or_row(g->do_stride, row_o), row_o, cp->es),
                  range(lse, p->heads_q, cp->local, cp->local, 4)};
    span outs[] = {range(dq, cp->local, or_row(g->dq_stride, row_q), row_q, ges),
                   range(dk, cp->local, or_row(g->dk_stride, cp->row_k), cp->row_k, ges),
                   range(dv, cp->local, or_row(g->dv_stride, cp->row_v), cp->row_v, ges)};
    for (size_t a = 0; a < 3; a++) {
        for (size_t b = 0; b < 6; b++)
            if (overlaps(outs[a], ins[b]))
                return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s overlaps %s", names[6 + a],
                            names[b]);
        for (size_t b = a + 1; b < 3; b++)
            if (overlaps(outs[a], outs[b]))
                return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s overlaps %s", names[6 + a],
                            names[6 + b]);
    }
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_mpi_cp_backward(clvarlen_mpi_cp *cp,
                                         const clvarlen_attention_bwd_params *bwd, const void *q,
                                         const void *k, const void *v, const void *o,
                                         const void *dout, const float *lse, void *dq, void *dk,
                                         void *dv)
{
    if (!cp)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    stats_begin(cp, &t0);
    clvarlen_attention_bwd_params user, g;
    clvarlen_status st = read_bwd(bwd, &user);
    if (!st)
        st = check_backward_host(cp, &user, q, k, v, o, dout, lse, dq, dk, dv);
    if (!st)
        st = host_ws(cp, true);
    if ((st = agree(cp->comm, cp->rank, st)))
        return st;
    st = gather_kv_host(cp, k, v);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    g = user;
    g.grad_f32 = 1;
    g.dq_stride = 0;
    g.dk_stride = cp->row_kv;
    g.dv_stride = cp->row_kv;
    if (!st && cp->local) {
        st = clvarlen_attention_backward(cp->ctx, p, &g, q, cp->kv_glob,
                                         cp->kv_glob + (size_t)cp->row_k * cp->es, o, dout, lse,
                                         cp->local_cu, cp->cu, cp->position, cp->dq32,
                                         cp->dkv_glob, cp->dkv_glob + cp->row_k);
        if (st)
            st = fail_core(st, cp->ctx, "attention backward of this rank's queries");
    } else if (!st) {
        /* no queries here: this rank adds nothing to any key */
        memset(cp->dkv_glob, 0, sizeof(float) * (size_t)(cp->total * cp->row_kv));
    }
    if (!st && cp->total) {
        st = clvarlen_gather_rows(cp->ctx, CLVARLEN_DTYPE_F32, cp->row_kv, cp->dkv_glob,
                                  cp->total, 0, cp->perm, cp->total, cp->dkv_rank, 0);
        if (st)
            st = fail_core(st, cp->ctx, "putting dk/dv in rank order (clvarlen_gather_rows)");
    }
    /* The reduce-scatter needs every rank: agree first, write nothing on error. */
    if ((st = agree_after(cp, st)))
        return st;
    if ((st = reduce_scatter_dkv(cp, cp->dkv_rank, cp->dkv_loc)))
        return st;
    const clvarlen_dtype out = user.grad_f32 ? CLVARLEN_DTYPE_F32 : p->dtype;
    store_rows(cp->dq32, row_q, cp->local, row_q, out, dq, or_row(user.dq_stride, row_q));
    store_rows(cp->dkv_loc, cp->row_kv, cp->local, cp->row_k, out, dk,
               or_row(user.dk_stride, cp->row_k));
    store_rows(cp->dkv_loc + cp->row_k, cp->row_kv, cp->local, cp->row_v, out, dv,
               or_row(user.dv_stride, cp->row_v));
    stats_end(cp, t0);
    return CLVARLEN_SUCCESS;
}

/* ---------------------------------------------------------------- cl_mem entry points */

#if CLVARLEN_HAVE_OPENCL

static clvarlen_status cl_fail(cl_int e, const char *what)
{
    return fail(CLVARLEN_ERROR_OPENCL, "%s failed: OpenCL error %d", what, (int)e);
}

/* A device buffer of at least `bytes` (OpenCL has no empty buffers), filled
 * from host when `init` is given. */
static clvarlen_status dev_buf(clvarlen_mpi_cp *cp, cl_mem *m, size_t bytes, const void *init)
{
    if (*m)
        return CLVARLEN_SUCCESS;
    cl_int e = CL_SUCCESS;
    size_t n = bytes < 64 ? 64 : bytes;
    *m = clCreateBuffer(cp->cl_ctx, CL_MEM_READ_WRITE, n, NULL, &e);
    if (!*m)
        return e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ||
                       e == CL_OUT_OF_HOST_MEMORY || e == CL_INVALID_BUFFER_SIZE
                   ? fail(CLVARLEN_ERROR_OUT_OF_MEMORY,
                          "CP device work space: %zu bytes (OpenCL error %d)", n, (int)e)
                   : cl_fail(e, "clCreateBuffer (CP device work space)");
    if (init && bytes) {
        e = clEnqueueWriteBuffer(cp->queue, *m, CL_TRUE, 0, bytes, init, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            return cl_fail(e, "clEnqueueWriteBuffer (CP plan)");
    }
    return CLVARLEN_SUCCESS;
}

/* Pinned host memory (CL_MEM_ALLOC_HOST_PTR, mapped once for the handle's life). */
static clvarlen_status pinned(clvarlen_mpi_cp *cp, cl_mem *m, void **ptr, size_t bytes)
{
    if (*m)
        return CLVARLEN_SUCCESS;
    cl_int e = CL_SUCCESS;
    size_t n = bytes < 64 ? 64 : bytes;
    *m = clCreateBuffer(cp->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &e);
    if (!*m)
        return fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP pinned staging: %zu bytes (OpenCL error %d)",
                    n, (int)e);
    *ptr = clEnqueueMapBuffer(cp->queue, *m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, n, 0, NULL,
                              NULL, &e);
    if (!*ptr) {
        release_mem(m);
        return cl_fail(e, "clEnqueueMapBuffer (CP pinned staging)");
    }
    return CLVARLEN_SUCCESS;
}

static clvarlen_status cl_ws(clvarlen_mpi_cp *cp, bool backward)
{
    if (!cp->queue) {
        cl_device_id dev;
        clvarlen_status st = clvarlen_context_get_cl(cp->ctx, &cp->cl_ctx, &dev, &cp->queue);
        if (st) {
            cp->queue = NULL;
            return fail(st, "the cl_mem CP entry points need an OpenCL context (%s)",
                        clvarlen_status_name(st));
        }
    }
    const size_t rb = (size_t)cp->row_kv * cp->es, rb32 = (size_t)cp->row_kv * 4;
    const size_t T = (size_t)cp->total, L = (size_t)cp->local;
    const size_t row_q = (size_t)cp->p.heads_q * (size_t)cp->p.head_dim;
    const size_t row_o = (size_t)cp->p.heads_q * (size_t)cp->p.head_dim_v;
    clvarlen_status st;
    if ((st = dev_buf(cp, &cp->d_perm, 4 * T, cp->perm)) ||
        (st = dev_buf(cp, &cp->d_cu, 4 * (size_t)(cp->n + 1), cp->cu)) ||
        (st = dev_buf(cp, &cp->d_local_cu, 4 * (size_t)(cp->n + 1), cp->local_cu)) ||
        (st = dev_buf(cp, &cp->d_pos, 4 * L, cp->position)) ||
        (st = dev_buf(cp, &cp->d_kv_all, T * rb, NULL)) ||
        (st = dev_buf(cp, &cp->d_kv_glob, T * rb, NULL)) ||
        /* the forward's o and lse before the outcome is agreed; the backward's dq (f32) */
        (st = dev_buf(cp, &cp->d_dq32, L * (row_o * cp->es + 4 * (size_t)cp->p.heads_q) +
                                           L * row_q * 4, NULL)) ||
        (st = pinned(cp, &cp->h_kv_loc, &cp->m_kv_loc, L * rb)) ||
        (st = pinned(cp, &cp->h_kv_all, &cp->m_kv_all, T * rb)))
        return st;
    if (!backward)
        return CLVARLEN_SUCCESS;
    if ((st = dev_buf(cp, &cp->d_dkv_glob, T * rb32, NULL)) ||
        (st = dev_buf(cp, &cp->d_dkv_rank, T * rb32, NULL)) ||
        (st = pinned(cp, &cp->h_dkv_rank, &cp->m_dkv_rank, T * rb32)) ||
        (st = pinned(cp, &cp->h_dkv_loc, &cp->m_dkv_loc, L * rb32)) ||
        (st = pinned(cp, &cp->h_dq32, &cp->m_dq32,
                         L * row_q * 4 + L * (rb > row_q * cp->es ? rb : row_q * cp->es))))
        return st;
    return CLVARLEN_SUCCESS;
}

/* A caller's buffer: present and large enough for `rows` rows of `row`
 * elements every `stride` from `offset` (bytes; aligned to es). */
static clvarlen_status check_mem(cl_mem m, size_t offset, int64_t rows, int64_t stride,
                                 int64_t row, size_t es, const char *name)
{
    if (rows <= 0)
        return CLVARLEN_SUCCESS;
    if (!m)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s", name);
    if (offset % es)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s offset %zu: not a multiple of %zu", name,
                    offset, es);
    size_t size = 0;
    cl_int e = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (e != CL_SUCCESS)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s is not a valid buffer (OpenCL error %d)",
                    name, (int)e);
    size_t need = offset + (size_t)((rows - 1) * stride + row) * es;
    if (size < need)
        return fail(CLVARLEN_ERROR_BUFFER_TOO_SMALL, "%s: %zu bytes, the shapes need %zu", name,
                    size, need);
    return CLVARLEN_SUCCESS;
}

/* Rows between a device buffer and host memory with their own pitches. */
static cl_int rect(clvarlen_mpi_cp *cp, bool read, cl_mem m, size_t off, size_t dev_pitch,
                   void *host, size_t host_pitch, size_t row_bytes, int64_t rows, cl_bool block)
{
    if (rows <= 0)
        return CL_SUCCESS;
    const size_t bo[3] = {off, 0, 0}, ho[3] = {0, 0, 0}, reg[3] = {row_bytes, (size_t)rows, 1};
    return read ? clEnqueueReadBufferRect(cp->queue, m, block, bo, ho, reg, dev_pitch, 0,
                                          host_pitch, 0, host, 0, NULL, NULL)
                : clEnqueueWriteBufferRect(cp->queue, m, block, bo, ho, reg, dev_pitch, 0,
                                           host_pitch, 0, host, 0, NULL, NULL);
}

static clvarlen_status gather_kv_cl(clvarlen_mpi_cp *cp, cl_mem k, size_t k_off, cl_mem v,
                                    size_t v_off)
{
    const size_t es = cp->es, rb = (size_t)cp->row_kv * es;
    cl_int e = rect(cp, true, k, k_off, (size_t)cp->k_su * es, cp->m_kv_loc, rb,
                    (size_t)cp->row_k * es, cp->local, CL_FALSE);
    if (e == CL_SUCCESS)
        e = rect(cp, true, v, v_off, (size_t)cp->v_su * es,
                 (char *)cp->m_kv_loc + (size_t)cp->row_k * es, rb, (size_t)cp->row_v * es,
                 cp->local, CL_TRUE);
    if (e != CL_SUCCESS)
        return cl_fail(e, "reading this rank's K/V into pinned memory");
    clvarlen_status st = allgather_kv(cp, cp->m_kv_loc, cp->m_kv_all);
    if (st || !cp->total)
        return st;
    e = clEnqueueWriteBuffer(cp->queue, cp->d_kv_all, CL_FALSE, 0, (size_t)cp->total * rb,
                             cp->m_kv_all, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return cl_fail(e, "writing the gathered K/V to the device");
    st = clvarlen_cl_scatter_rows(cp->ctx, cp->p.dtype, cp->row_kv, cp->d_kv_all, 0, 0,
                                  cp->d_perm, 0, cp->total, cp->d_kv_glob, 0, cp->total, 0,
                                  CLVARLEN_SCATTER_OVERWRITE, CLVARLEN_SCATTER_UNIQUE_INDICES, 0,
                                  NULL, NULL);
    return st ? fail_core(st, cp->ctx, "putting K/V in global order (clvarlen_cl_scatter_rows)")
              : st;
}

clvarlen_status clvarlen_mpi_cp_forward_cl(clvarlen_mpi_cp *cp, cl_mem q, size_t q_offset,
                                           cl_mem k, size_t k_offset, cl_mem v, size_t v_offset,
                                           cl_mem o, size_t o_offset, cl_mem lse,
                                           size_t lse_offset)
{
    if (!cp)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    stats_begin(cp, &t0);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    const int64_t os = or_row(p->o_stride, row_o);
    const size_t es = cp->es, L = (size_t)cp->local;
    clvarlen_status st = cl_ws(cp, false);
    if (!st && (st = check_mem(q, q_offset, cp->local, or_row(p->q_stride, row_q), row_q, es, "q")) ==
                   CLVARLEN_SUCCESS &&
        (st = check_mem(k, k_offset, cp->local, cp->k_su, cp->row_k, es, "k")) ==
            CLVARLEN_SUCCESS &&
        (st = check_mem(v, v_offset, cp->local, cp->v_su, cp->row_v, es, "v")) ==
            CLVARLEN_SUCCESS &&
        (st = check_mem(o, o_offset, cp->local, os, row_o, es, "o")) == CLVARLEN_SUCCESS &&
        lse)
        st = check_mem(lse, lse_offset, p->heads_q, cp->local, cp->local, 4, "lse");
    if ((st = agree(cp->comm, cp->rank, st)))
        return st;
    st = gather_kv_cl(cp, k, k_offset, v, v_offset);
    const size_t lse_tmp = L * (size_t)row_o * es;
    if (!st && cp->local) {
        clvarlen_attention_params pl = *p;
        pl.o_stride = 0;
        st = clvarlen_cl_attention_forward(cp->ctx, &pl, q, q_offset, cp->d_kv_glob, 0,
                                           cp->d_kv_glob, (size_t)cp->row_k * es, cp->d_local_cu,
                                           0, cp->d_cu, 0, cp->d_pos, 0, cp->d_dq32, 0,
                                           cp->d_dq32, lse_tmp, 0, NULL, NULL);
        if (st)
            st = fail_core(st, cp->ctx, "attention forward of this rank's queries");
        cl_int e = clFinish(cp->queue);
        if (!st && e != CL_SUCCESS)
            st = cl_fail(e, "clFinish (CP forward)");
    }
    if ((st = agree_after(cp, st)))
        return st;
    if (cp->local) {
        const size_t so[3] = {0, 0, 0}, dof[3] = {o_offset, 0, 0};
        const size_t reg[3] = {(size_t)row_o * es, L, 1};
        cl_int e = clEnqueueCopyBufferRect(cp->queue, cp->d_dq32, o, so, dof, reg,
                                           (size_t)row_o * es, 0, (size_t)os * es, 0, 0, NULL,
                                           NULL);
        if (e == CL_SUCCESS && lse)
            e = clEnqueueCopyBuffer(cp->queue, cp->d_dq32, lse, lse_tmp, lse_offset,
                                    4 * L * (size_t)p->heads_q, 0, NULL, NULL);
        if (e == CL_SUCCESS)
            e = clFinish(cp->queue);
        if (e != CL_SUCCESS)
            st = cl_fail(e, "copying o and lse out");
    }
    stats_end(cp, t0);
    return st;
}

clvarlen_status clvarlen_mpi_cp_backward_cl(
    clvarlen_mpi_cp *cp, const clvarlen_attention_bwd_params *bwd, cl_mem q, size_t q_offset,
    cl_mem k, size_t k_offset, cl_mem v, size_t v_offset, cl_mem o, size_t o_offset, cl_mem dout,
    size_t do_offset, cl_mem lse, size_t lse_offset, cl_mem dq, size_t dq_offset, cl_mem dk,
    size_t dk_offset, cl_mem dv, size_t dv_offset)
{
    if (!cp)
        return fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    stats_begin(cp, &t0);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    const size_t es = cp->es, L = (size_t)cp->local;
    clvarlen_attention_bwd_params user, g;
    clvarlen_status st = read_bwd(bwd, &user);
    const size_t ges = user.grad_f32 ? 4 : es;
    if (!st)
        st = check_bwd_strides(cp, &user);
    if (!st)
        st = cl_ws(cp, true);
    struct {
        cl_mem m;
        size_t off;
        int64_t rows, stride, row;
        size_t es;
        const char *name;
    } bufs[] = {
        {q, q_offset, cp->local, or_row(p->q_stride, row_q), row_q, es, "q"},
        {k, k_offset, cp->local, cp->k_su, cp->row_k, es, "k"},
        {v, v_offset, cp->local, cp->v_su, cp->row_v, es, "v"},
        {o, o_offset, cp->local, or_row(p->o_stride, row_o), row_o, es, "o"},
        {dout, do_offset, cp->local, or_row(user.do_stride, row_o), row_o, es, "do"},
        {lse, lse_offset, p->heads_q, cp->local, cp->local, 4, "lse"},
        {dq, dq_offset, cp->local, or_row(user.dq_stride, row_q), row_q, ges, "dq"},
        {dk, dk_offset, cp->local, or_row(user.dk_stride, cp->row_k), cp->row_k, ges, "dk"},
        {dv, dv_offset, cp->local, or_row(user.dv_stride, cp->row_v), cp->row_v, ges, "dv"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && !st; i++)
        st = check_mem(bufs[i].m, bufs[i].off, bufs[i].rows, bufs[i].stride, bufs[i].row,
                       bufs[i].es, bufs[i].name);
    if ((st = agree(cp->comm, cp->rank, st)))
        return st;
    st = gather_kv_cl(cp, k, k_offset, v, v_offset);
    g = user;
    g.grad_f32 = 1;
    g.dq_stride = 0;
    g.dk_stride = cp->row_kv;
    g.dv_stride = cp->row_kv;
    cl_int e = CL_SUCCESS;
    if (!st && cp->local) {
        st = clvarlen_cl_attention_backward(
            cp->ctx, p, &g, q, q_offset, cp->d_kv_glob, 0, cp->d_kv_glob, (size_t)cp->row_k * es,
            o, o_offset, dout, do_offset, lse, lse_offset, cp->d_local_cu, 0, cp->d_cu, 0,
            cp->d_pos, 0, cp->d_dq32, 0, cp->d_dkv_glob, 0, cp->d_dkv_glob,
            (size_t)cp->row_k * 4, 0, NULL, NULL);
        if (st)
            st = fail_core(st, cp->ctx, "attention backward of this rank's queries");
    } else if (!st && cp->total) {
        const float zero = 0.0f;
        e = clEnqueueFillBuffer(cp->queue, cp->d_dkv_glob, &zero, sizeof zero, 0,
                                (size_t)cp->total * (size_t)cp->row_kv * 4, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            st = cl_fail(e, "clearing dk/dv");
    }
    if (!st && cp->total) {
        st = clvarlen_cl_gather_rows(cp->ctx, CLVARLEN_DTYPE_F32, cp->row_kv, cp->d_dkv_glob, 0,
                                     cp->total, 0, cp->d_perm, 0, cp->total, cp->d_dkv_rank, 0, 0,
                                     0, NULL, NULL);
        if (st)
            st = fail_core(st, cp->ctx, "putting dk/dv in rank order (clvarlen_cl_gather_rows)");
        else if ((e = clEnqueueReadBuffer(cp->queue, cp->d_dkv_rank, CL_FALSE, 0,
                                          (size_t)cp->total * (size_t)cp->row_kv * 4,
                                          cp->m_dkv_rank, 0, NULL, NULL)) != CL_SUCCESS)
            st = cl_fail(e, "reading dk/dv to pinned memory");
    }
    if (!st && cp->local &&
        (e = clEnqueueReadBuffer(cp->queue, cp->d_dq32, CL_FALSE, 0, L * (size_t)row_q * 4,
                                 cp->m_dq32, 0, NULL, NULL)) != CL_SUCCESS)
        st = cl_fail(e, "reading dq to pinned memory");
    if (!st && (e = clFinish(cp->queue)) != CL_SUCCESS)
        st = cl_fail(e, "clFinish (CP backward)");
    if ((st = agree_after(cp, st)))
        return st;
    if ((st = reduce_scatter_dkv(cp, cp->m_dkv_rank, cp->m_dkv_loc)))
        return st;
    if (!cp->local) {
        stats_end(cp, t0);
        return CLVARLEN_SUCCESS;
    }
    /* Out: f32 rows straight from pinned memory, or rounded once into the
     * pinned area after dq first. */
    float *dkv = cp->m_dkv_loc, *dq32 = cp->m_dq32;
    char *conv = (char *)cp->m_dq32 + L * (size_t)row_q * 4;
    const size_t rb32 = (size_t)cp->row_kv * 4;
    if (user.grad_f32) {
        e = rect(cp, false, dq, dq_offset, (size_t)or_row(user.dq_stride, row_q) * 4,
                 dq32, (size_t)row_q * 4, (size_t)row_q * 4, cp->local, CL_FALSE);
        if (e == CL_SUCCESS)
            e = rect(cp, false, dk, dk_offset, (size_t)or_row(user.dk_stride, cp->row_k) * 4,
                     dkv, rb32, (size_t)cp->row_k * 4, cp->local, CL_FALSE);
        if (e == CL_SUCCESS)
            e = rect(cp, false, dv, dv_offset, (size_t)or_row(user.dv_stride, cp->row_v) * 4,
                     dkv + cp->row_k, rb32, (size_t)cp->row_v * 4, cp->local, CL_TRUE);
    } else {
        const size_t rbx = (size_t)cp->row_kv * es;
        store_rows(dkv, cp->row_kv, cp->local, cp->row_k, p->dtype, conv, cp->row_kv);
        store_rows(dkv + cp->row_k, cp->row_kv, cp->local, cp->row_v, p->dtype,
                   conv + (size_t)cp->row_k * es, cp->row_kv);
        e = rect(cp, false, dk, dk_offset, (size_t)or_row(user.dk_stride, cp->row_k) * es, conv,
                 rbx, (size_t)cp->row_k * es, cp->local, CL_FALSE);
        if (e == CL_SUCCESS)
            e = rect(cp, false, dv, dv_offset, (size_t)or_row(user.dv_stride, cp->row_v) * es,
                     conv + (size_t)cp->row_k * es, rbx, (size_t)cp->row_v * es, cp->local,
                     CL_TRUE);
        /* dq after dk/dv are out: conv is reused */
        if (e == CL_SUCCESS) {
            store_rows(dq32, row_q, cp->local, row_q, p->dtype, conv, row_q);
            e = rect(cp, false, dq, dq_offset, (size_t)or_row(user.dq_stride, row_q) * es, conv,
                     (size_t)row_q * es, (size_t)row_q * es, cp->local, CL_TRUE);
        }
    }
    if (e != CL_SUCCESS)
        st = cl_fail(e, "writing dq, dk, dv");
    stats_end(cp, t0);
    return st;
}

#endif /* CLVARLEN_HAVE_OPENCL */
