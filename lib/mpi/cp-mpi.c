/* libclvarlen-mpi: the CP handle, the collective agreement and the exchange
 * steps (cp-mpi.h says how the library is laid out). */
#include "cp-mpi.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/half.h"

/* ---------------------------------------------------------------- errors */

static _Thread_local char g_error[1024];

clvarlen_status cpm_fail(clvarlen_status st, const char *fmt, ...)
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
clvarlen_status cpm_fail_core(clvarlen_status st, clvarlen_context *ctx, const char *what)
{
    return cpm_fail(st, "%s: %s (%s)", what, clvarlen_last_error(ctx), clvarlen_status_name(st));
}

static clvarlen_status fail_mpi(int err, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", err);
    return cpm_fail(CLVARLEN_ERROR_INTERNAL, "%s failed: %s", what, msg);
}

/* ---------------------------------------------------------------- collective agreement */

/* Every rank's status of the local checks, agreed before any data moves: the
 * status of the lowest failing rank wins. A rank that failed keeps its own
 * message; the others get one naming that rank. One small all-reduce when
 * every rank passed, and a broadcast of the status when one did not. */
clvarlen_status cpm_agree(MPI_Comm comm, int rank, clvarlen_status st)
{
    int mine = (int)st, who = INT_MAX, first = st != CLVARLEN_SUCCESS ? rank : INT_MAX;
    int err = MPI_Allreduce(&first, &who, 1, MPI_INT, MPI_MIN, comm);
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allreduce (agreeing on the checks)");
    if (who == INT_MAX)
        return CLVARLEN_SUCCESS;
    err = MPI_Bcast(&mine, 1, MPI_INT, who, comm);
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Bcast (agreeing on the checks)");
    if (st != CLVARLEN_SUCCESS)
        return st;
    return cpm_fail((clvarlen_status)mine, "rank %d of the CP group failed (%s); no output was written",
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
    if (p->dtype != CLVARLEN_DTYPE_F32 && p->dtype != CLVARLEN_DTYPE_F16 &&
        p->dtype != CLVARLEN_DTYPE_BF16)
        return cpm_fail(CLVARLEN_ERROR_UNSUPPORTED, "dtype %s: CP attention takes f32, f16 or bf16",
                    clvarlen_dtype_name(p->dtype));
    if (p->heads_q <= 0 || p->heads_kv <= 0 || p->heads_q % p->heads_kv != 0)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "heads_q %d, heads_kv %d: both > 0 with heads_q %% heads_kv == 0", p->heads_q,
                    p->heads_kv);
    int32_t dv = p->head_dim_v ? p->head_dim_v : p->head_dim;
    if (p->head_dim < 0 || dv < 0)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "head_dim %d, head_dim_v %d: negative",
                    p->head_dim, p->head_dim_v);
    if (!head_dim_ok(p->head_dim) || !head_dim_ok(dv))
        return cpm_fail(CLVARLEN_ERROR_UNSUPPORTED,
                    "head_dim %d, head_dim_v %d: each a multiple of 16 in [16, 256]", p->head_dim,
                    dv);
    if (!isfinite(p->scale) || p->scale < 0.0f)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "scale %g: finite and >= 0 (0 = 1/sqrt(D))",
                    (double)p->scale);
    if (p->window_left < -1 || p->window_right < -1)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "window (%d, %d): each >= -1",
                    p->window_left, p->window_right);
    if (!isfinite(p->softcap) || p->softcap < 0.0f)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "softcap %g: finite and >= 0",
                    (double)p->softcap);
    if (!(p->dropout_p >= 0.0f && p->dropout_p < 1.0f))
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "dropout_p %g: in [0, 1)",
                    (double)p->dropout_p);
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * dv;
    const int64_t row_k = (int64_t)p->heads_kv * p->head_dim, row_v = (int64_t)p->heads_kv * dv;
    if ((p->q_stride && p->q_stride < row_q) || (p->o_stride && p->o_stride < row_o) ||
        (p->k_stride && p->k_stride < row_k) || (p->v_stride && p->v_stride < row_v) ||
        p->q_stride < 0 || p->k_stride < 0 || p->v_stride < 0 || p->o_stride < 0)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "token strides (q %lld, k %lld, v %lld, o %lld): 0 or at least the row",
                    (long long)p->q_stride, (long long)p->k_stride, (long long)p->v_stride,
                    (long long)p->o_stride);
    return CLVARLEN_SUCCESS;
}

static clvarlen_status check_cu(const int32_t *cu, int64_t n)
{
    if (cu[0] != 0)
        return cpm_fail(CLVARLEN_ERROR_INVALID_CU_SEQLENS, "cu_seqlens[0] = %d, not 0", cu[0]);
    for (int64_t s = 0; s < n; s++)
        if (cu[s + 1] < cu[s])
            return cpm_fail(CLVARLEN_ERROR_INVALID_CU_SEQLENS,
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

static void free_handle(clvarlen_mpi_cp *cp)
{
    if (!cp)
        return;
    free_host_ws(cp);
    cpm_free_cl_ws(cp);
    free(cp->cu);
    free(cp->local_cu);
    free(cp->position);
    free(cp->perm);
    free(cp->counts);
    free(cp->displs);
    free(cp->counts_f32);
    free(cp->seg_kv);
    free(cp->seg_dkv);
    free(cp->iota);
    clvarlen_context_destroy(cp->cpu);
    free(cp);
}

/* Everything a rank can compute alone: the plans of every rank (for the
 * permutation and the counts) and its own positions. */
static clvarlen_status build_local(clvarlen_mpi_cp *cp, const clvarlen_attention_params *params,
                                   const int32_t *cu_seqlens, int64_t n)
{
    if (params->struct_size < CLVARLEN_ATTENTION_PARAMS_MIN_SIZE)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                        "params->struct_size %u is smaller than the first released size (init it)",
                        params->struct_size);
    /* the caller's struct, as long as it says it is; this library's defaults past it */
    clvarlen_attention_params_init(&cp->p);
    memcpy(&cp->p, params,
           params->struct_size < sizeof cp->p ? params->struct_size : sizeof cp->p);
    cp->p.struct_size = (uint32_t)sizeof cp->p;
    params = &cp->p;
    clvarlen_status st = check_params(params);
    if (st)
        return st;
    if (n < 0 || n > INT32_MAX - 1)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "n %lld: in [0, 2^31 - 1)", (long long)n);
    if ((st = check_cu(cu_seqlens, n)))
        return st;
    cp->n = n;
    cp->total = cu_seqlens[n];
    if (cp->p.head_dim_v == 0)
        cp->p.head_dim_v = cp->p.head_dim;
    cp->es = clvarlen_dtype_size(params->dtype);
    cp->row_k = (int64_t)params->heads_kv * params->head_dim;
    cp->row_v = (int64_t)params->heads_kv * cp->p.head_dim_v;
    cp->row_kv = cp->row_k + cp->row_v;
    /* One K|V row in bytes is an MPI count; every rank's rows too (counted
     * in rows), and its f32 gradient elements (the reduce-scatter counts). */
    if ((uint64_t)cp->row_kv * 4u > (uint64_t)INT_MAX)
        return cpm_fail(CLVARLEN_ERROR_OVERFLOW, "a K|V row of %lld elements is beyond one MPI count",
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
        return cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
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
            return cpm_fail_core(st, cp->ctx, "clvarlen_cp_plan");
        }
        if (plan.local_tokens > INT_MAX ||
            (uint64_t)plan.local_tokens * (uint64_t)cp->row_kv > (uint64_t)INT_MAX) {
            free(tmp_cu);
            return cpm_fail(CLVARLEN_ERROR_OVERFLOW,
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
        return cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
    clvarlen_cp_plan_out plan;
    memset(&plan, 0, sizeof plan);
    plan.local_cu_seqlens = cp->local_cu;
    plan.position = cp->position;
    plan.capacity = cp->local;
    if ((st = clvarlen_cp_plan(cp->ctx, cu_seqlens, n, cp->world, cp->rank, &plan)))
        return cpm_fail_core(st, cp->ctx, "clvarlen_cp_plan");
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

/* ---------------------------------------------------------------- on-node exchange */

/* Shared memory when every rank of the group is on one node (every rank
 * agrees), unless CLVARLEN_MPI_SHM=0 on any rank. Open MPI moves large
 * messages between processes of one node by copying through small shared
 * segments (measured 1.8-1.9 GB/s on the GPU machine, docs/PERFORMANCE.md);
 * a window shared by all ranks lets each read the others' rows directly. */
static clvarlen_status choose_exchange(clvarlen_mpi_cp *cp)
{
    MPI_Comm node;
    int node_size = 0, err = MPI_Comm_split_type(cp->comm, MPI_COMM_TYPE_SHARED, cp->rank,
                                                 MPI_INFO_NULL, &node);
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Comm_split_type");
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    /* the host-side row work: this node's cores shared by its ranks */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores > node_size ? (int)(cores / node_size) : 1;
    clvarlen_options *opt = NULL;
    clvarlen_status st = clvarlen_options_create(&opt);
    if (!st && !(st = clvarlen_options_set_device(opt, "cpu")) &&
        !(st = clvarlen_options_set_threads(opt, threads)))
        st = clvarlen_context_create(opt, &cp->cpu);
    clvarlen_options_destroy(opt);
    int64_t n = cp->total > cp->local ? cp->total : cp->local;
    if (!st && !(cp->iota = malloc(sizeof(int32_t) * (size_t)(n + 1))))
        st = CLVARLEN_ERROR_OUT_OF_MEMORY;
    for (int64_t i = 0; !st && i < n; i++)
        cp->iota[i] = (int32_t)i;
    if ((st = cpm_agree(cp->comm, cp->rank,
                        st ? cpm_fail(st, "CP handle: the host-side CPU context (%s)",
                                      clvarlen_status_name(st))
                           : st)))
        return st;
    const char *env = getenv("CLVARLEN_MPI_SHM");
    int mine = node_size == cp->world && !(env && !strcmp(env, "0")), all = 0;
    if ((err = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, cp->comm)) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allreduce (choosing the exchange)");
    cp->shm = all;
    return CLVARLEN_SUCCESS;
}

clvarlen_status cpm_copy_rows(clvarlen_mpi_cp *cp, clvarlen_dtype dt, int64_t row_elems,
                              const void *src, void *dst, int64_t rows)
{
    clvarlen_status st = rows ? clvarlen_gather_rows(cp->cpu, dt, row_elems, src, rows, 0,
                                                     cp->iota, rows, dst, 0)
                              : CLVARLEN_SUCCESS;
    return st ? cpm_fail_core(st, cp->cpu, "copying rows on the host") : st;
}

clvarlen_status cpm_add_rows(clvarlen_mpi_cp *cp, int64_t row_elems, const float *src, float *dst,
                             int64_t rows)
{
    clvarlen_status st =
        rows ? clvarlen_scatter_rows(cp->cpu, CLVARLEN_DTYPE_F32, row_elems, src, 0, cp->iota,
                                     rows, dst, rows, 0, CLVARLEN_SCATTER_ACCUMULATE,
                                     CLVARLEN_SCATTER_UNIQUE_INDICES)
             : CLVARLEN_SUCCESS;
    return st ? cpm_fail_core(st, cp->cpu, "summing rows on the host") : st;
}

/* One window of `bytes` per rank, locked for load/store for the handle's
 * life; seg[r] = rank r's part. */
static clvarlen_status shm_window(clvarlen_mpi_cp *cp, size_t bytes, MPI_Win *win, void ***seg)
{
    void *base = NULL;
    int err = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, MPI_INFO_NULL, cp->comm, &base, win);
    if (err != MPI_SUCCESS) {
        *win = MPI_WIN_NULL;
        return fail_mpi(err, "MPI_Win_allocate_shared (CP exchange)");
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, *win);
    *seg = malloc(sizeof(void *) * (size_t)cp->world);
    if (!*seg)
        return cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
    for (int r = 0; r < cp->world; r++) {
        MPI_Aint size;
        int disp;
        if ((err = MPI_Win_shared_query(*win, r, &size, &disp, &(*seg)[r])) != MPI_SUCCESS)
            return fail_mpi(err, "MPI_Win_shared_query");
    }
    return CLVARLEN_SUCCESS;
}

clvarlen_status cpm_shm_kv(clvarlen_mpi_cp *cp)
{
    if (cp->win_kv != MPI_WIN_NULL)
        return CLVARLEN_SUCCESS;
    return shm_window(cp, (size_t)cp->local * (size_t)cp->row_kv * cp->es, &cp->win_kv,
                      (void ***)&cp->seg_kv);
}

clvarlen_status cpm_shm_dkv(clvarlen_mpi_cp *cp)
{
    if (cp->win_dkv != MPI_WIN_NULL)
        return CLVARLEN_SUCCESS;
    return shm_window(cp, (size_t)cp->total * (size_t)cp->row_kv * 4, &cp->win_dkv,
                      (void ***)&cp->seg_dkv);
}

clvarlen_status cpm_shm_publish(clvarlen_mpi_cp *cp, MPI_Win win)
{
    double t = MPI_Wtime();
    int err = MPI_Win_sync(win);
    if (err == MPI_SUCCESS)
        err = MPI_Barrier(cp->comm);
    if (err == MPI_SUCCESS)
        err = MPI_Win_sync(win);
    cp->stats.exchange_seconds += MPI_Wtime() - t;
    return err == MPI_SUCCESS ? CLVARLEN_SUCCESS : fail_mpi(err, "publishing the CP exchange");
}

clvarlen_status clvarlen_mpi_cp_create(clvarlen_context *context, MPI_Comm comm,
                                       const clvarlen_attention_params *params,
                                       const int32_t *cu_seqlens, int64_t n, clvarlen_mpi_cp **out)
{
    /* Without a communicator there is no one to agree with: plain errors. */
    if (comm == MPI_COMM_NULL)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "comm is MPI_COMM_NULL");
    int inter = 0, world = 0, rank = 0, err;
    if ((err = MPI_Comm_test_inter(comm, &inter)) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Comm_test_inter");
    if (inter)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "comm is an intercommunicator");
    if ((err = MPI_Comm_size(comm, &world)) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Comm_size");
    if ((err = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Comm_rank");

    clvarlen_status st = CLVARLEN_SUCCESS;
    clvarlen_mpi_cp *cp = NULL;
    if (!context || !params || !cu_seqlens || !out)
        st = cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s",
                  !context ? "context" : !params ? "params" : !cu_seqlens ? "cu_seqlens" : "cp");
    else if (!(cp = calloc(1, sizeof *cp)))
        st = cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
    if (!st) {
        cp->ctx = context;
        cp->world = world;
        cp->rank = rank;
        cp->comm = MPI_COMM_NULL;
        cp->kv_row = MPI_DATATYPE_NULL;
        cp->win_kv = cp->win_dkv = MPI_WIN_NULL;
        st = build_local(cp, params, cu_seqlens, n);
    }
    if ((st = cpm_agree(comm, rank, st))) {
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
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
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
    if ((st = choose_exchange(cp))) {
        clvarlen_mpi_cp_destroy(cp);
        return st;
    }
    *out = cp;
    return CLVARLEN_SUCCESS;
}

void clvarlen_mpi_cp_destroy(clvarlen_mpi_cp *cp)
{
    if (!cp)
        return;
    MPI_Win *wins[] = {&cp->win_kv, &cp->win_dkv};
    for (int i = 0; i < 2; i++)
        if (*wins[i] != MPI_WIN_NULL) {
            MPI_Win_unlock_all(*wins[i]);
            MPI_Win_free(wins[i]);
        }
    if (cp->kv_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&cp->kv_row);
    if (cp->comm != MPI_COMM_NULL)
        MPI_Comm_free(&cp->comm);
    free_handle(cp);
}

clvarlen_status clvarlen_mpi_cp_local_tokens(const clvarlen_mpi_cp *cp, int64_t *local_tokens)
{
    if (!cp || !local_tokens)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s", !cp ? "cp" : "local_tokens");
    *local_tokens = cp->local;
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_mpi_cp_plan(const clvarlen_mpi_cp *cp, int32_t *local_cu_seqlens,
                                     int32_t *position)
{
    if (!cp)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    if (local_cu_seqlens)
        memcpy(local_cu_seqlens, cp->local_cu, sizeof(int32_t) * (size_t)(cp->n + 1));
    if (position && cp->local)
        memcpy(position, cp->position, sizeof(int32_t) * (size_t)cp->local);
    return CLVARLEN_SUCCESS;
}

clvarlen_status clvarlen_mpi_cp_get_stats(const clvarlen_mpi_cp *cp, clvarlen_mpi_cp_stats *stats)
{
    if (!cp || !stats)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s", !cp ? "cp" : "stats");
    if (stats->struct_size < sizeof(clvarlen_mpi_cp_stats))
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "stats->struct_size %u: set it to %zu",
                    stats->struct_size, sizeof(clvarlen_mpi_cp_stats));
    *stats = cp->stats;
    stats->struct_size = (uint32_t)sizeof(clvarlen_mpi_cp_stats);
    return CLVARLEN_SUCCESS;
}

/* ---------------------------------------------------------------- shared steps */

void cpm_stats_begin(clvarlen_mpi_cp *cp, double *t0)
{
    memset(&cp->stats, 0, sizeof cp->stats);
    cp->stats.struct_size = (uint32_t)sizeof cp->stats;
    *t0 = MPI_Wtime();
}

void cpm_stats_end(clvarlen_mpi_cp *cp, double t0)
{
    cp->stats.total_seconds = MPI_Wtime() - t0;
    cp->stats.compute_seconds = cp->stats.total_seconds - cp->stats.exchange_seconds;
}

/* The bytes of the all-gather of K|V rows (this rank's shard to each peer,
 * every peer's shard to this rank). */
void cpm_count_allgather(clvarlen_mpi_cp *cp)
{
    const int64_t rb = cp->row_kv * (int64_t)cp->es;
    cp->stats.bytes_sent += cp->local * rb * (cp->world - 1);
    cp->stats.bytes_received += (cp->total - cp->local) * rb;
}

/* The reduce-scatter of the f32 dk|dv rows: every other rank's share out,
 * the others' contributions to this rank's rows in. */
void cpm_count_reduce_scatter(clvarlen_mpi_cp *cp)
{
    const int64_t rb = cp->row_kv * 4;
    cp->stats.bytes_sent += (cp->total - cp->local) * rb;
    cp->stats.bytes_received += cp->local * rb * (cp->world - 1);
}

clvarlen_status cpm_allgather_kv(clvarlen_mpi_cp *cp, const void *loc, void *all)
{
    double t = MPI_Wtime();
    int err = MPI_Allgatherv(loc, cp->counts[cp->rank], cp->kv_row, all, cp->counts, cp->displs, cp->kv_row, cp->comm);
    cp->stats.exchange_seconds += MPI_Wtime() - t;
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allgatherv (K/V shards)");
    cpm_count_allgather(cp);
    return CLVARLEN_SUCCESS;
}

clvarlen_status cpm_reduce_scatter_dkv(clvarlen_mpi_cp *cp, const float *rank_order, float *loc)
{
    double t = MPI_Wtime();
    int err = MPI_Reduce_scatter(rank_order, loc, cp->counts_f32, MPI_FLOAT, MPI_SUM, cp->comm);
    cp->stats.exchange_seconds += MPI_Wtime() - t;
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Reduce_scatter (dk/dv)");
    cpm_count_reduce_scatter(cp);
    return CLVARLEN_SUCCESS;
}

/* After the local computation: every rank learns whether any failed. */
clvarlen_status cpm_agree_after(clvarlen_mpi_cp *cp, clvarlen_status st)
{
    return cpm_agree(cp->comm, cp->rank, st);
}

void *cpm_alloc_ws(void **slot, size_t bytes, clvarlen_status *st)
{
    if (!*slot && !*st) {
        *slot = malloc(bytes ? bytes : 1);
        if (!*slot)
            *st = cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP work space: out of host memory (%zu bytes)",
                       bytes);
    }
    return *slot;
}

/* f32 rows -> rows of `dtype` (f32: a copy), each `elems` wide, strided. */
void cpm_store_rows(const float *src, int64_t src_stride, int64_t rows, int64_t elems,
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


/* bwd (or the defaults) as this library reads it; the strides it gives to the
 * core backward are set by the caller of this. */
clvarlen_status cpm_read_bwd(const clvarlen_attention_bwd_params *bwd,
                                clvarlen_attention_bwd_params *g)
{
    clvarlen_attention_bwd_params_init(g);
    if (!bwd)
        return CLVARLEN_SUCCESS;
    if (bwd->struct_size < CLVARLEN_ATTENTION_BWD_PARAMS_MIN_SIZE)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "bwd->struct_size %u is smaller than the first released size (init it)",
                    bwd->struct_size);
    size_t n = bwd->struct_size < sizeof *g ? bwd->struct_size : sizeof *g;
    memcpy(g, bwd, n);
    g->struct_size = (uint32_t)sizeof *g;
    return CLVARLEN_SUCCESS;
}

clvarlen_status cpm_check_bwd_strides(const clvarlen_mpi_cp *cp,
                                         const clvarlen_attention_bwd_params *g)
{
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    if (g->do_stride < 0 || g->dq_stride < 0 || g->dk_stride < 0 || g->dv_stride < 0 ||
        (g->do_stride && g->do_stride < row_o) || (g->dq_stride && g->dq_stride < row_q) ||
        (g->dk_stride && g->dk_stride < cp->row_k) || (g->dv_stride && g->dv_stride < cp->row_v))
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT,
                    "bwd strides (do %lld, dq %lld, dk %lld, dv %lld): 0 or at least the row",
                    (long long)g->do_stride, (long long)g->dq_stride, (long long)g->dk_stride,
                    (long long)g->dv_stride);
    return CLVARLEN_SUCCESS;
}
