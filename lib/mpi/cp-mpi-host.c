/* libclvarlen-mpi: the host-memory entry points (cp-mpi.h). */
#include "cp-mpi.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This rank's K and V rows, packed as K|V rows, gathered from every rank and
 * put in global order in cp->kv_glob. */
static clvarlen_status gather_kv_host(clvarlen_mpi_cp *cp, const void *k, const void *v)
{
    const size_t es = cp->es, rb = (size_t)cp->row_kv * es;
    clvarlen_status st = cp->shm ? cpm_shm_kv(cp) : CLVARLEN_SUCCESS;
    if (st)
        return st;
    /* on one node, straight into this rank's part of the shared window */
    char *loc = cp->shm ? cp->seg_kv[cp->rank] : cp->kv_loc;
    for (int64_t t = 0; t < cp->local; t++) {
        memcpy(loc + (size_t)t * rb, (const char *)k + (size_t)(t * cp->k_su) * es,
               (size_t)cp->row_k * es);
        memcpy(loc + (size_t)t * rb + (size_t)cp->row_k * es,
               (const char *)v + (size_t)(t * cp->v_su) * es, (size_t)cp->row_v * es);
    }
    if (cp->shm) {
        if ((st = cpm_shm_publish(cp, cp->win_kv)))
            return st;
        cpm_count_allgather(cp);
    } else if ((st = cpm_allgather_kv(cp, cp->kv_loc, cp->kv_all))) {
        return st;
    }
    /* every rank's rows into global order: one scatter, or one per rank's window */
    for (int r = 0; r < (cp->shm ? cp->world : 1) && !st; r++) {
        const void *src = cp->shm ? (const void *)cp->seg_kv[r] : cp->kv_all;
        const int32_t *idx = cp->shm ? cp->perm + cp->displs[r] : cp->perm;
        int64_t n = cp->shm ? cp->counts[r] : cp->total;
        if (n)
            st = clvarlen_scatter_rows(cp->cpu, cp->p.dtype, cp->row_kv, src, 0, idx, n,
                                       cp->kv_glob, cp->total, 0, CLVARLEN_SCATTER_OVERWRITE, 0);
    }
    return st ? cpm_fail_core(st, cp->cpu, "putting K/V in global order (clvarlen_scatter_rows)")
              : st;
}

/* The sum over ranks of their f32 dk|dv of this rank's keys into dkv_loc: on
 * one node from the shared window (ranks summed in order 0, 1, ...), else
 * MPI_Reduce_scatter. rank_order: this rank's dk|dv of every key, rank order. */
static clvarlen_status reduce_dkv_host(clvarlen_mpi_cp *cp)
{
    if (!cp->shm)
        return cpm_reduce_scatter_dkv(cp, cp->dkv_rank, cp->dkv_loc);
    clvarlen_status st = cpm_shm_publish(cp, cp->win_dkv);
    double t = MPI_Wtime();
    const size_t mine = (size_t)cp->displs[cp->rank] * (size_t)cp->row_kv;
    if (!st)
        st = cpm_copy_rows(cp, CLVARLEN_DTYPE_F32, cp->row_kv, cp->seg_dkv[0] + mine,
                           cp->dkv_loc, cp->local);
    for (int r = 1; r < cp->world && !st; r++)
        st = cpm_add_rows(cp, cp->row_kv, cp->seg_dkv[r] + mine, cp->dkv_loc, cp->local);
    cp->stats.exchange_seconds += MPI_Wtime() - t;
    cpm_count_reduce_scatter(cp);
    return st;
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

/* The local checks of a forward call on host memory. */
static clvarlen_status check_forward_host(clvarlen_mpi_cp *cp, const void *q, const void *k,
                                          const void *v, const void *o, const float *lse)
{
    if (!cp->local)
        return CLVARLEN_SUCCESS; /* an empty rank reads and writes nothing */
    if (!q || !k || !v || !o)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s (this rank holds %lld tokens)",
                    !q ? "q" : !k ? "k" : !v ? "v" : "o", (long long)cp->local);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    span so = range(o, cp->local, cpm_or_row(p->o_stride, row_o), row_o, cp->es);
    span sl = range(lse, p->heads_q, cp->local, cp->local, 4);
    span in[] = {range(q, cp->local, cpm_or_row(p->q_stride, row_q), row_q, cp->es),
                 range(k, cp->local, cp->k_su, cp->row_k, cp->es),
                 range(v, cp->local, cp->v_su, cp->row_v, cp->es)};
    for (size_t i = 0; i < 3; i++)
        if (overlaps(so, in[i]) || overlaps(sl, in[i]))
            return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s overlaps %s",
                        overlaps(so, in[i]) ? "o" : "lse", i == 0 ? "q" : i == 1 ? "k" : "v");
    if (overlaps(so, sl))
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "o overlaps lse");
    return CLVARLEN_SUCCESS;
}

/* The host buffers of the gather, and of the forward's outputs. */
static clvarlen_status host_ws(clvarlen_mpi_cp *cp, bool backward)
{
    clvarlen_status st = CLVARLEN_SUCCESS;
    const size_t rb = (size_t)cp->row_kv * cp->es, rb32 = (size_t)cp->row_kv * 4;
    const size_t row_q = (size_t)cp->p.heads_q * (size_t)cp->p.head_dim;
    const size_t row_o = (size_t)cp->p.heads_q * (size_t)cp->p.head_dim_v;
    const size_t L = (size_t)cp->local, T = (size_t)cp->total;
    /* the collectives' send and receive rows (on one node the shared windows serve) */
    if (!cp->shm) {
        cpm_alloc_ws((void **)&cp->kv_loc, L * rb, &st);
        cpm_alloc_ws((void **)&cp->kv_all, T * rb, &st);
        if (backward)
            cpm_alloc_ws((void **)&cp->dkv_rank, T * rb32, &st);
    }
    cpm_alloc_ws((void **)&cp->kv_glob, T * rb, &st);
    /* the backward's f32 dq; the forward's o and lse before the outcome is agreed */
    cpm_alloc_ws((void **)&cp->dq32, L * (row_o * cp->es + 4 * (size_t)cp->p.heads_q) +
                                         L * row_q * 4, &st);
    if (backward) {
        cpm_alloc_ws((void **)&cp->dkv_glob, T * rb32, &st);
        cpm_alloc_ws((void **)&cp->dkv_loc, L * rb32, &st);
    }
    return st;
}

clvarlen_status clvarlen_mpi_cp_forward(clvarlen_mpi_cp *cp, const void *q, const void *k,
                                        const void *v, void *o, float *lse)
{
    if (!cp)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    cpm_stats_begin(cp, &t0);
    clvarlen_status st = check_forward_host(cp, q, k, v, o, lse);
    if (!st)
        st = host_ws(cp, false);
    if ((st = cpm_agree(cp->comm, cp->rank, st)))
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
            st = cpm_fail_core(st, cp->ctx, "attention forward of this rank's queries");
    }
    st = cpm_agree_after(cp, st);
    if (!st && cp->local) {
        const int64_t os = cpm_or_row(p->o_stride, row_o);
        for (int64_t t = 0; t < cp->local; t++)
            memcpy((char *)o + (size_t)(t * os) * cp->es, o_tmp + (size_t)(t * row_o) * cp->es,
                   (size_t)row_o * cp->es);
        if (lse)
            memcpy(lse, lse_tmp, sizeof(float) * (size_t)(cp->local * p->heads_q));
    }
    cpm_stats_end(cp, t0);
    return st;
}

static clvarlen_status check_backward_host(clvarlen_mpi_cp *cp,
                                           const clvarlen_attention_bwd_params *g, const void *q,
                                           const void *k, const void *v, const void *o,
                                           const void *dout, const float *lse, void *dq, void *dk,
                                           void *dv)
{
    clvarlen_status st = cpm_check_bwd_strides(cp, g);
    if (st || !cp->local)
        return st;
    const void *need[] = {q, k, v, o, dout, lse, dq, dk, dv};
    const char *names[] = {"q", "k", "v", "o", "do", "lse", "dq", "dk", "dv"};
    for (size_t i = 0; i < 9; i++)
        if (!need[i])
            return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s (this rank holds %lld tokens)",
                        names[i], (long long)cp->local);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    const size_t ges = g->grad_f32 ? 4 : cp->es;
    span ins[] = {range(q, cp->local, cpm_or_row(p->q_stride, row_q), row_q, cp->es),
                  range(k, cp->local, cp->k_su, cp->row_k, cp->es),
                  range(v, cp->local, cp->v_su, cp->row_v, cp->es),
                  range(o, cp->local, cpm_or_row(p->o_stride, row_o), row_o, cp->es),
                  range(dout, cp->local, cpm_or_row(g->do_stride, row_o), row_o, cp->es),
                  range(lse, p->heads_q, cp->local, cp->local, 4)};
    span outs[] = {range(dq, cp->local, cpm_or_row(g->dq_stride, row_q), row_q, ges),
                   range(dk, cp->local, cpm_or_row(g->dk_stride, cp->row_k), cp->row_k, ges),
                   range(dv, cp->local, cpm_or_row(g->dv_stride, cp->row_v), cp->row_v, ges)};
    for (size_t a = 0; a < 3; a++) {
        for (size_t b = 0; b < 6; b++)
            if (overlaps(outs[a], ins[b]))
                return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s overlaps %s", names[6 + a],
                            names[b]);
        for (size_t b = a + 1; b < 3; b++)
            if (overlaps(outs[a], outs[b]))
                return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s overlaps %s", names[6 + a],
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
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    cpm_stats_begin(cp, &t0);
    clvarlen_attention_bwd_params user, g;
    clvarlen_status st = cpm_read_bwd(bwd, &user);
    if (!st)
        st = check_backward_host(cp, &user, q, k, v, o, dout, lse, dq, dk, dv);
    if (!st)
        st = host_ws(cp, true);
    if ((st = cpm_agree(cp->comm, cp->rank, st)))
        return st;
    /* the windows are collective: made here, where every rank is */
    if (cp->shm && ((st = cpm_shm_kv(cp)) || (st = cpm_shm_dkv(cp))))
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
            st = cpm_fail_core(st, cp->ctx, "attention backward of this rank's queries");
    } else if (!st) {
        /* no queries here: this rank adds nothing to any key */
        memset(cp->dkv_glob, 0, sizeof(float) * (size_t)(cp->total * cp->row_kv));
    }
    if (!st && cp->total) {
        /* on one node straight into this rank's part of the shared window */
        float *rank_order = cp->shm ? cp->seg_dkv[cp->rank] : cp->dkv_rank;
        st = clvarlen_gather_rows(cp->cpu, CLVARLEN_DTYPE_F32, cp->row_kv, cp->dkv_glob,
                                  cp->total, 0, cp->perm, cp->total, rank_order, 0);
        if (st)
            st = cpm_fail_core(st, cp->cpu, "putting dk/dv in rank order (clvarlen_gather_rows)");
    }
    /* The reduce-scatter needs every rank: agree first, write nothing on error. */
    if ((st = cpm_agree_after(cp, st)))
        return st;
    if ((st = reduce_dkv_host(cp)))
        return st;
    const clvarlen_dtype out = user.grad_f32 ? CLVARLEN_DTYPE_F32 : p->dtype;
    cpm_store_rows(cp->dq32, row_q, cp->local, row_q, out, dq, cpm_or_row(user.dq_stride, row_q));
    cpm_store_rows(cp->dkv_loc, cp->row_kv, cp->local, cp->row_k, out, dk,
               cpm_or_row(user.dk_stride, cp->row_k));
    cpm_store_rows(cp->dkv_loc + cp->row_k, cp->row_kv, cp->local, cp->row_v, out, dv,
               cpm_or_row(user.dv_stride, cp->row_v));
    cpm_stats_end(cp, t0);
    return CLVARLEN_SUCCESS;
}

