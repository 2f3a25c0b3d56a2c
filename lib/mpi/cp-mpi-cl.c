/* libclvarlen-mpi: the cl_mem entry points (cp-mpi.h): K/V shards read to
 * pinned host memory, exchanged, written back and put in global order on the
 * device; the attention on the device; dk/dv summed over ranks on host. */
#include "cp-mpi.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
void cpm_free_cl_ws(clvarlen_mpi_cp *cp)
{
    if (!cp->queue)
        return;
    unmap_pinned(cp, &cp->h_kv_loc, &cp->m_kv_loc);
    unmap_pinned(cp, &cp->h_kv_all, &cp->m_kv_all);
    unmap_pinned(cp, &cp->h_dkv_rank, &cp->m_dkv_rank);
    unmap_pinned(cp, &cp->h_dkv_loc, &cp->m_dkv_loc);
    unmap_pinned(cp, &cp->h_dq32, &cp->m_dq32);
    clFinish(cp->queue);
    free(cp->ev);
    cp->ev = NULL;
    cl_mem *d[] = {&cp->d_kv_all,  &cp->d_kv_glob, &cp->d_perm,
                   &cp->d_cu,      &cp->d_local_cu, &cp->d_pos,
                   &cp->d_dkv_glob, &cp->d_dkv_rank, &cp->d_dq32};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        release_mem(d[i]);
}


static clvarlen_status cl_fail(cl_int e, const char *what)
{
    return cpm_fail(CLVARLEN_ERROR_OPENCL, "%s failed: OpenCL error %d", what, (int)e);
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
                   ? cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY,
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
        return cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP pinned staging: %zu bytes (OpenCL error %d)",
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
            return cpm_fail(st, "the cl_mem CP entry points need an OpenCL context (%s)",
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
    if (!cp->ev && !(cp->ev = calloc((size_t)cp->world, sizeof(cl_event))))
        return cpm_fail(CLVARLEN_ERROR_OUT_OF_MEMORY, "CP handle: out of host memory");
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
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL %s", name);
    if (offset % es)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s offset %zu: not a multiple of %zu", name,
                    offset, es);
    size_t size = 0;
    cl_int e = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (e != CL_SUCCESS)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s is not a valid buffer (OpenCL error %d)",
                    name, (int)e);
    size_t need = offset + (size_t)((rows - 1) * stride + row) * es;
    if (size < need)
        return cpm_fail(CLVARLEN_ERROR_BUFFER_TOO_SMALL, "%s: %zu bytes, the shapes need %zu", name,
                    size, need);
    return CLVARLEN_SUCCESS;
}

/* One tensor argument of a cl_mem entry point. */
typedef struct cl_arg {
    cl_mem m;
    size_t off;
    int64_t rows, stride, row;
    size_t es;
    const char *name;
    bool out;
} cl_arg;

/* The root buffer and offset of a (sub-)buffer. */
static cl_mem root_of(cl_mem m, size_t *off)
{
    cl_mem parent = NULL;
    size_t o = 0;
    if (clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) ==
            CL_SUCCESS &&
        parent && clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof o, &o, NULL) == CL_SUCCESS) {
        *off += o;
        return parent;
    }
    return m;
}

/* Each argument present and large enough (check_mem), and no output's bytes
 * overlapping another argument's in the same buffer (or parent buffer). */
static clvarlen_status check_args(const cl_arg *a, size_t n)
{
    clvarlen_status st = CLVARLEN_SUCCESS;
    for (size_t i = 0; i < n && !st; i++)
        st = check_mem(a[i].m, a[i].off, a[i].rows, a[i].stride, a[i].row, a[i].es, a[i].name);
    for (size_t i = 0; i < n && !st; i++)
        for (size_t j = 0; j < n && !st; j++) {
            if (i == j || !a[i].out || (a[j].out && j < i) || a[i].rows <= 0 || a[j].rows <= 0)
                continue;
            size_t oi = a[i].off, oj = a[j].off;
            if (root_of(a[i].m, &oi) != root_of(a[j].m, &oj))
                continue;
            size_t ni = (size_t)((a[i].rows - 1) * a[i].stride + a[i].row) * a[i].es;
            size_t nj = (size_t)((a[j].rows - 1) * a[j].stride + a[j].row) * a[j].es;
            if (oi < oj + nj && oj < oi + ni)
                st = cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "%s overlaps %s in the same buffer",
                              a[i].name, a[j].name);
        }
    return st;
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
    char *loc = cp->m_kv_loc, *all = cp->m_kv_all;
    cl_int e = rect(cp, true, k, k_off, (size_t)cp->k_su * es, loc, rb, (size_t)cp->row_k * es,
                    cp->local, CL_FALSE);
    if (e == CL_SUCCESS)
        e = rect(cp, true, v, v_off, (size_t)cp->v_su * es, loc + (size_t)cp->row_k * es, rb,
                 (size_t)cp->row_v * es, cp->local, CL_TRUE);
    if (e != CL_SUCCESS)
        return cl_fail(e, "reading this rank's K/V into pinned memory");
    clvarlen_status st;
    if (cp->shm) {
        /* pinned -> this rank's part of the shared window -> every rank's part
         * into pinned rows in rank order: host copies with the node's threads
         * (the device reads pageable memory at a fraction of the pinned rate) */
        double t = MPI_Wtime();
        st = cpm_copy_rows(cp, cp->p.dtype, cp->row_kv, loc, cp->seg_kv[cp->rank], cp->local);
        if (!st)
            st = cpm_shm_publish(cp, cp->win_kv);
        /* each rank's rows go to the device as soon as they are in pinned
         * memory: the copy of the next overlaps this one's transfer */
        for (int r = 0; r < cp->world && !st && e == CL_SUCCESS; r++) {
            char *at = all + (size_t)cp->displs[r] * rb;
            st = cpm_copy_rows(cp, cp->p.dtype, cp->row_kv, cp->seg_kv[r], at, cp->counts[r]);
            if (!st && cp->counts[r])
                e = clEnqueueWriteBuffer(cp->queue, cp->d_kv_all, CL_FALSE,
                                         (size_t)cp->displs[r] * rb, (size_t)cp->counts[r] * rb,
                                         at, 0, NULL, NULL);
            if (e == CL_SUCCESS)
                e = clFlush(cp->queue);
        }
        cp->stats.exchange_seconds += MPI_Wtime() - t;
        cpm_count_allgather(cp);
        if (e != CL_SUCCESS)
            return cl_fail(e, "writing the gathered K/V to the device");
    } else {
        st = cpm_allgather_kv(cp, loc, all);
        if (!st && cp->total)
            e = clEnqueueWriteBuffer(cp->queue, cp->d_kv_all, CL_FALSE, 0,
                                     (size_t)cp->total * rb, all, 0, NULL, NULL);
        if (e != CL_SUCCESS)
            return cl_fail(e, "writing the gathered K/V to the device");
    }
    if (st || !cp->total)
        return st;
    st = clvarlen_cl_scatter_rows(cp->ctx, cp->p.dtype, cp->row_kv, cp->d_kv_all, 0, 0,
                                  cp->d_perm, 0, cp->total, cp->d_kv_glob, 0, cp->total, 0,
                                  CLVARLEN_SCATTER_OVERWRITE, CLVARLEN_SCATTER_UNIQUE_INDICES, 0,
                                  NULL, NULL);
    return st ? cpm_fail_core(st, cp->ctx, "putting K/V in global order (clvarlen_cl_scatter_rows)")
              : st;
}

/* The sum over ranks of their f32 dk|dv of this rank's keys, from pinned
 * m_dkv_rank (this rank's, every key, rank order) into pinned m_dkv_loc. On
 * one node through the shared window, summed on the host in rank order (0,
 * 1, ...); else MPI_Reduce_scatter. */
static clvarlen_status reduce_dkv_cl(clvarlen_mpi_cp *cp)
{
    const size_t rb32 = (size_t)cp->row_kv * 4;
    if (!cp->shm) {
        cl_int e = cp->total ? clEnqueueReadBuffer(cp->queue, cp->d_dkv_rank, CL_TRUE, 0,
                                                   (size_t)cp->total * rb32, cp->m_dkv_rank, 0,
                                                   NULL, NULL)
                             : CL_SUCCESS;
        if (e != CL_SUCCESS)
            return cl_fail(e, "reading dk/dv to pinned memory");
        return cpm_reduce_scatter_dkv(cp, cp->m_dkv_rank, cp->m_dkv_loc);
    }
    /* each rank's slice to pinned memory, then into the window as soon as it
     * is there: the copy of one overlaps the transfer of the next */
    double t = MPI_Wtime();
    clvarlen_status st = CLVARLEN_SUCCESS;
    cl_int e = CL_SUCCESS;
    for (int r = 0; r < cp->world && e == CL_SUCCESS; r++) {
        size_t off = (size_t)cp->displs[r] * rb32;
        if (cp->counts[r])
            e = clEnqueueReadBuffer(cp->queue, cp->d_dkv_rank, CL_FALSE, off,
                                    (size_t)cp->counts[r] * rb32, (char *)cp->m_dkv_rank + off,
                                    0, NULL, &cp->ev[r]);
    }
    if (e == CL_SUCCESS)
        e = clFlush(cp->queue);
    for (int r = 0; r < cp->world; r++) {
        if (!cp->ev[r])
            continue;
        if (e == CL_SUCCESS)
            e = clWaitForEvents(1, &cp->ev[r]);
        clReleaseEvent(cp->ev[r]);
        cp->ev[r] = NULL;
        size_t off = (size_t)cp->displs[r] * (size_t)cp->row_kv;
        if (e == CL_SUCCESS && !st)
            st = cpm_copy_rows(cp, CLVARLEN_DTYPE_F32, cp->row_kv, (float *)cp->m_dkv_rank + off,
                               cp->seg_dkv[cp->rank] + off, cp->counts[r]);
    }
    if (e != CL_SUCCESS)
        return cl_fail(e, "reading dk/dv to pinned memory");
    if (!st)
        st = cpm_shm_publish(cp, cp->win_dkv);
    const size_t mine = (size_t)cp->displs[cp->rank] * (size_t)cp->row_kv;
    if (!st)
        st = cpm_copy_rows(cp, CLVARLEN_DTYPE_F32, cp->row_kv, cp->seg_dkv[0] + mine,
                           cp->m_dkv_loc, cp->local);
    for (int r = 1; r < cp->world && !st; r++)
        st = cpm_add_rows(cp, cp->row_kv, cp->seg_dkv[r] + mine, cp->m_dkv_loc, cp->local);
    cp->stats.exchange_seconds += MPI_Wtime() - t;
    cpm_count_reduce_scatter(cp);
    return st;
}

clvarlen_status clvarlen_mpi_cp_forward_cl(clvarlen_mpi_cp *cp, cl_mem q, size_t q_offset,
                                           cl_mem k, size_t k_offset, cl_mem v, size_t v_offset,
                                           cl_mem o, size_t o_offset, cl_mem lse,
                                           size_t lse_offset)
{
    if (!cp)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    cpm_stats_begin(cp, &t0);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    const int64_t os = cpm_or_row(p->o_stride, row_o);
    const size_t es = cp->es, L = (size_t)cp->local;
    clvarlen_status st = cl_ws(cp, false);
    const cl_arg args[] = {
        {q, q_offset, cp->local, cpm_or_row(p->q_stride, row_q), row_q, es, "q", false},
        {k, k_offset, cp->local, cp->k_su, cp->row_k, es, "k", false},
        {v, v_offset, cp->local, cp->v_su, cp->row_v, es, "v", false},
        {o, o_offset, cp->local, os, row_o, es, "o", true},
        {lse, lse_offset, lse && cp->local ? p->heads_q : 0, cp->local, cp->local, 4, "lse", true},
    };
    if (!st)
        st = check_args(args, sizeof args / sizeof args[0]);
    if ((st = cpm_agree(cp->comm, cp->rank, st)))
        return st;
    /* the window is collective: made here, where every rank is */
    if (cp->shm && (st = cpm_shm_kv(cp)))
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
            st = cpm_fail_core(st, cp->ctx, "attention forward of this rank's queries");
        cl_int e = clFinish(cp->queue);
        if (!st && e != CL_SUCCESS)
            st = cl_fail(e, "clFinish (CP forward)");
    }
    if ((st = cpm_agree_after(cp, st)))
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
    cpm_stats_end(cp, t0);
    return st;
}

/* The backward's outputs from pinned memory: f32 rows as they are, or
 * rounded once to dtype in the pinned area after dq (dk|dv first, then dq). */
static cl_int write_grads(clvarlen_mpi_cp *cp, const clvarlen_attention_bwd_params *user,
                          cl_mem dq, size_t dq_offset, cl_mem dk, size_t dk_offset, cl_mem dv,
                          size_t dv_offset)
{
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const size_t es = cp->es, L = (size_t)cp->local;
    cl_int e;
    float *dkv = cp->m_dkv_loc, *dq32 = cp->m_dq32;
    char *conv = (char *)cp->m_dq32 + L * (size_t)row_q * 4;
    const size_t rb32 = (size_t)cp->row_kv * 4;
    if (user->grad_f32) {
        e = rect(cp, false, dq, dq_offset, (size_t)cpm_or_row(user->dq_stride, row_q) * 4,
                 dq32, (size_t)row_q * 4, (size_t)row_q * 4, cp->local, CL_FALSE);
        if (e == CL_SUCCESS)
            e = rect(cp, false, dk, dk_offset, (size_t)cpm_or_row(user->dk_stride, cp->row_k) * 4,
                     dkv, rb32, (size_t)cp->row_k * 4, cp->local, CL_FALSE);
        if (e == CL_SUCCESS)
            e = rect(cp, false, dv, dv_offset, (size_t)cpm_or_row(user->dv_stride, cp->row_v) * 4,
                     dkv + cp->row_k, rb32, (size_t)cp->row_v * 4, cp->local, CL_TRUE);
    } else {
        const size_t rbx = (size_t)cp->row_kv * es;
        cpm_store_rows(dkv, cp->row_kv, cp->local, cp->row_k, p->dtype, conv, cp->row_kv);
        cpm_store_rows(dkv + cp->row_k, cp->row_kv, cp->local, cp->row_v, p->dtype,
                   conv + (size_t)cp->row_k * es, cp->row_kv);
        e = rect(cp, false, dk, dk_offset, (size_t)cpm_or_row(user->dk_stride, cp->row_k) * es, conv,
                 rbx, (size_t)cp->row_k * es, cp->local, CL_FALSE);
        if (e == CL_SUCCESS)
            e = rect(cp, false, dv, dv_offset, (size_t)cpm_or_row(user->dv_stride, cp->row_v) * es,
                     conv + (size_t)cp->row_k * es, rbx, (size_t)cp->row_v * es, cp->local,
                     CL_TRUE);
        /* dq after dk/dv are out: conv is reused */
        if (e == CL_SUCCESS) {
            cpm_store_rows(dq32, row_q, cp->local, row_q, p->dtype, conv, row_q);
            e = rect(cp, false, dq, dq_offset, (size_t)cpm_or_row(user->dq_stride, row_q) * es, conv,
                     (size_t)row_q * es, (size_t)row_q * es, cp->local, CL_TRUE);
        }
    }
    return e;
}

clvarlen_status clvarlen_mpi_cp_backward_cl(
    clvarlen_mpi_cp *cp, const clvarlen_attention_bwd_params *bwd, cl_mem q, size_t q_offset,
    cl_mem k, size_t k_offset, cl_mem v, size_t v_offset, cl_mem o, size_t o_offset, cl_mem dout,
    size_t do_offset, cl_mem lse, size_t lse_offset, cl_mem dq, size_t dq_offset, cl_mem dk,
    size_t dk_offset, cl_mem dv, size_t dv_offset)
{
    if (!cp)
        return cpm_fail(CLVARLEN_ERROR_INVALID_ARGUMENT, "NULL cp");
    double t0;
    cpm_stats_begin(cp, &t0);
    const clvarlen_attention_params *p = &cp->p;
    const int64_t row_q = (int64_t)p->heads_q * p->head_dim;
    const int64_t row_o = (int64_t)p->heads_q * p->head_dim_v;
    const size_t es = cp->es, L = (size_t)cp->local;
    clvarlen_attention_bwd_params user, g;
    clvarlen_status st = cpm_read_bwd(bwd, &user);
    const size_t ges = user.grad_f32 ? 4 : es;
    if (!st)
        st = cpm_check_bwd_strides(cp, &user);
    if (!st)
        st = cl_ws(cp, true);
    const cl_arg args[] = {
        {q, q_offset, cp->local, cpm_or_row(p->q_stride, row_q), row_q, es, "q", false},
        {k, k_offset, cp->local, cp->k_su, cp->row_k, es, "k", false},
        {v, v_offset, cp->local, cp->v_su, cp->row_v, es, "v", false},
        {o, o_offset, cp->local, cpm_or_row(p->o_stride, row_o), row_o, es, "o", false},
        {dout, do_offset, cp->local, cpm_or_row(user.do_stride, row_o), row_o, es, "do", false},
        {lse, lse_offset, cp->local ? p->heads_q : 0, cp->local, cp->local, 4, "lse", false},
        {dq, dq_offset, cp->local, cpm_or_row(user.dq_stride, row_q), row_q, ges, "dq", true},
        {dk, dk_offset, cp->local, cpm_or_row(user.dk_stride, cp->row_k), cp->row_k, ges, "dk",
         true},
        {dv, dv_offset, cp->local, cpm_or_row(user.dv_stride, cp->row_v), cp->row_v, ges, "dv",
         true},
    };
    if (!st)
        st = check_args(args, sizeof args / sizeof args[0]);
    if ((st = cpm_agree(cp->comm, cp->rank, st)))
        return st;
    /* the windows are collective: made here, where every rank is */
    if (cp->shm && ((st = cpm_shm_kv(cp)) || (st = cpm_shm_dkv(cp))))
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
            st = cpm_fail_core(st, cp->ctx, "attention backward of this rank's queries");
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
            st = cpm_fail_core(st, cp->ctx, "putting dk/dv in rank order (clvarlen_cl_gather_rows)");
    }
    if (!st && cp->local &&
        (e = clEnqueueReadBuffer(cp->queue, cp->d_dq32, CL_FALSE, 0, L * (size_t)row_q * 4,
                                 cp->m_dq32, 0, NULL, NULL)) != CL_SUCCESS)
        st = cl_fail(e, "reading dq to pinned memory");
    if (!st && (e = clFinish(cp->queue)) != CL_SUCCESS)
        st = cl_fail(e, "clFinish (CP backward)");
    if ((st = cpm_agree_after(cp, st)))
        return st;
    if ((st = reduce_dkv_cl(cp)))
        return st;
    if (!cp->local) {
        cpm_stats_end(cp, t0);
        return CLVARLEN_SUCCESS;
    }
    cl_int e2 = write_grads(cp, &user, dq, dq_offset, dk, dk_offset, dv, dv_offset);
    if (e2 != CL_SUCCESS)
        st = cl_fail(e2, "writing dq, dk, dv");
    cpm_stats_end(cp, t0);
    return st;
}

#else /* no OpenCL in this build */

void cpm_free_cl_ws(clvarlen_mpi_cp *cp)
{
}

/* As libclvarlen's clvarlen_cl_* entry points, the cl_mem ones are exported by
 * every build, so the ABI does not depend on the configuration; here they
 * report CLVARLEN_ERROR_NO_OPENCL (on every rank alike: no exchange). */
typedef struct _cl_mem *cl_mem;
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_forward_cl(clvarlen_mpi_cp *cp, cl_mem q,
                                                        size_t q_offset, cl_mem k,
                                                        size_t k_offset, cl_mem v,
                                                        size_t v_offset, cl_mem o,
                                                        size_t o_offset, cl_mem lse,
                                                        size_t lse_offset);
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_backward_cl(
    clvarlen_mpi_cp *cp, const clvarlen_attention_bwd_params *bwd, cl_mem q, size_t q_offset,
    cl_mem k, size_t k_offset, cl_mem v, size_t v_offset, cl_mem o, size_t o_offset, cl_mem dout,
    size_t do_offset, cl_mem lse, size_t lse_offset, cl_mem dq, size_t dq_offset, cl_mem dk,
    size_t dk_offset, cl_mem dv, size_t dv_offset);

clvarlen_status clvarlen_mpi_cp_forward_cl(clvarlen_mpi_cp *cp, cl_mem q, size_t q_offset,
                                           cl_mem k, size_t k_offset, cl_mem v, size_t v_offset,
                                           cl_mem o, size_t o_offset, cl_mem lse,
                                           size_t lse_offset)
{
    return cpm_fail(CLVARLEN_ERROR_NO_OPENCL, "this build of clvarlen has no OpenCL");
}

clvarlen_status clvarlen_mpi_cp_backward_cl(
    clvarlen_mpi_cp *cp, const clvarlen_attention_bwd_params *bwd, cl_mem q, size_t q_offset,
    cl_mem k, size_t k_offset, cl_mem v, size_t v_offset, cl_mem o, size_t o_offset, cl_mem dout,
    size_t do_offset, cl_mem lse, size_t lse_offset, cl_mem dq, size_t dq_offset, cl_mem dk,
    size_t dk_offset, cl_mem dv, size_t dv_offset)
{
    return cpm_fail(CLVARLEN_ERROR_NO_OPENCL, "this build of clvarlen has no OpenCL");
}

#endif /* CLVARLEN_HAVE_OPENCL */

