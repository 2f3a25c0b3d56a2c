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
 *
 * cp-mpi.c: the handle, the collective agreement, the exchange steps;
 * cp-mpi-host.c: the host-memory entry points; cp-mpi-cl.c: the cl_mem ones.
 * Internal names start with cpm_ and are kept local by clvarlen-mpi.sym.
 */
#ifndef CLVARLEN_CP_MPI_H
#define CLVARLEN_CP_MPI_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if CLVARLEN_HAVE_OPENCL
#  include <clvarlen/clvarlen-cl.h>
#endif
#include <clvarlen/clvarlen-mpi.h>

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
    /* On one node (every rank shares memory): the exchange goes through MPI-3
     * shared-memory windows instead of MPI collectives (cp-mpi.c, cpm_shm_*). */
    int shm;
    MPI_Win win_kv, win_dkv;     /* MPI_WIN_NULL until first used */
    char **seg_kv;               /* [world]: each rank's K|V rows (its local order) */
    float **seg_dkv;             /* [world]: each rank's f32 dk|dv of every key (rank order) */
    int32_t *iota;               /* [max(total, local)] 0, 1, ...: row copies' index */
    /* The CPU fallback's threads (cores / ranks on this node) for the host-side
     * row copies and sums of the exchange, whatever device ctx computes on. */
    clvarlen_context *cpu;
#if CLVARLEN_HAVE_OPENCL
    /* device work space (cl_mem entry points) */
    cl_context cl_ctx;
    cl_command_queue queue;
    cl_mem d_kv_all, d_kv_glob, d_perm, d_cu, d_local_cu, d_pos;
    cl_mem d_dkv_glob, d_dkv_rank, d_dq32;
    cl_mem h_kv_loc, h_kv_all, h_dkv_rank, h_dkv_loc, h_dq32; /* pinned staging */
    cl_event *ev;                /* [world]: the pipelined reads of the dk|dv slices */
    void *m_kv_loc, *m_kv_all, *m_dkv_rank, *m_dkv_loc, *m_dq32; /* their mappings */
#endif
};

/* errors: the calling thread's message (clvarlen_mpi_last_error) */
clvarlen_status cpm_fail(clvarlen_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** A failed core call: its message, prefixed with what it was. */
clvarlen_status cpm_fail_core(clvarlen_status st, clvarlen_context *ctx, const char *what);

/** Every rank's status of its local checks, agreed before any data moves
 * (the lowest failing rank's status wins; the others' messages name it). */
clvarlen_status cpm_agree(MPI_Comm comm, int rank, clvarlen_status st);
/** The same after the local computation, on the handle's communicator. */
clvarlen_status cpm_agree_after(clvarlen_mpi_cp *cp, clvarlen_status st);

void cpm_stats_begin(clvarlen_mpi_cp *cp, double *t0);
void cpm_stats_end(clvarlen_mpi_cp *cp, double t0);

/** This rank's K|V rows (loc) to every rank, every rank's into all (rank order). */
clvarlen_status cpm_allgather_kv(clvarlen_mpi_cp *cp, const void *loc, void *all);
/** The f32 dk|dv rows of every key (rank order) summed over ranks; this rank's into loc. */
clvarlen_status cpm_reduce_scatter_dkv(clvarlen_mpi_cp *cp, const float *rank_order, float *loc);

/** The shared-memory windows of the on-node exchange (collective; allocated
 * once, at the first call that needs them): K|V rows (local rows per rank)
 * and f32 dk|dv (every key, per rank). */
clvarlen_status cpm_shm_kv(clvarlen_mpi_cp *cp);
clvarlen_status cpm_shm_dkv(clvarlen_mpi_cp *cp);
/** The stats' bytes of the K|V all-gather and of the dk|dv reduction (either exchange). */
void cpm_count_allgather(clvarlen_mpi_cp *cp);
void cpm_count_reduce_scatter(clvarlen_mpi_cp *cp);
/** Makes every rank's stores to win visible to all (sync, barrier, sync). */
clvarlen_status cpm_shm_publish(clvarlen_mpi_cp *cp, MPI_Win win);

/** rows rows of row_elems elements of dt, contiguous, from src to dst, on the
 * host with cp->cpu's threads. */
clvarlen_status cpm_copy_rows(clvarlen_mpi_cp *cp, clvarlen_dtype dt, int64_t row_elems,
                              const void *src, void *dst, int64_t rows);
/** dst (rows x row_elems f32) += src, the same way. */
clvarlen_status cpm_add_rows(clvarlen_mpi_cp *cp, int64_t row_elems, const float *src, float *dst,
                             int64_t rows);

/** *slot = malloc(bytes) unless already there or *st is an error. */
void *cpm_alloc_ws(void **slot, size_t bytes, clvarlen_status *st);
/** f32 rows -> rows of dtype (f32: a copy), each `elems` wide, strided. */
void cpm_store_rows(const float *src, int64_t src_stride, int64_t rows, int64_t elems,
                    clvarlen_dtype dtype, void *dst, int64_t dst_stride);
/** bwd (NULL: the defaults) as this library reads it. */
clvarlen_status cpm_read_bwd(const clvarlen_attention_bwd_params *bwd,
                             clvarlen_attention_bwd_params *g);
clvarlen_status cpm_check_bwd_strides(const clvarlen_mpi_cp *cp,
                                      const clvarlen_attention_bwd_params *g);
/** The device work space's release (cp-mpi-cl.c; nothing without OpenCL). */
void cpm_free_cl_ws(clvarlen_mpi_cp *cp);

/** A token stride or, when 0, the row (contiguous). */
static inline int64_t cpm_or_row(int64_t stride, int64_t row)
{
    return stride ? stride : row;
}

#endif
