/* clvarlen-mpi: context-parallel varlen attention across the processes of an
 * MPI communicator (SPEC 2.5 with SPEC 1 and 1.2).
 *
 * Every rank of a CP group holds its per-document head-tail shard of the
 * packed batch (clvarlen_cp_plan / clvarlen_cp_gather with world = the
 * communicator's size and rank = the process's rank in it): for each document,
 * chunk `rank` and chunk `2W-1-rank` of its 2W chunks. A forward call
 * all-gathers the shards of K and V over the communicator, puts them in
 * global order per document, and runs attention for this rank's queries
 * against each document's full K/V with the plan's positions as q_pos, so the
 * ranks' outputs together equal the unsharded attention of the whole batch. A
 * backward call re-gathers K/V, computes dq (local) and dk/dv of the whole
 * batch's keys (f32), and sums dk/dv back to the ranks that own them (in f32).
 *
 * The exchange: when every rank of the communicator is on one node, through
 * MPI-3 shared-memory windows (MPI_Win_allocate_shared: each rank writes its
 * rows once and reads the others' directly); otherwise one MPI_Allgatherv and
 * one MPI_Reduce_scatter. CLVARLEN_MPI_SHM=0 in the environment (of any rank)
 * keeps a one-node group on the collectives.
 *
 * This library is separate from libclvarlen (pkg-config `clvarlen-mpi`), so
 * the core library never depends on MPI. It uses the caller's communicator
 * (duplicated at create, so its messages never meet the caller's), and never
 * calls MPI_Init or MPI_Finalize: create and destroy handles between the
 * caller's MPI_Init and MPI_Finalize. MPI must be initialised with at least
 * MPI_THREAD_FUNNELED, and calls on one handle come from one thread at a time.
 *
 * Every function here whose documentation says "collective" must be called by
 * every rank of the communicator with the same handle, in the same order.
 * Collective calls first agree on the outcome of each rank's argument checks
 * (a small MPI_Allreduce) before any data moves: when one rank's arguments are
 * bad, every rank gets an error and none waits forever. The rank that found
 * the error returns its own status and message; the others return the same
 * status with a message that names that rank.
 *
 * Errors: the statuses of clvarlen.h, and their messages through
 * clvarlen_mpi_last_error() (per thread; the core library's messages of a
 * failed clvarlen call are copied there too). A failed MPI call is
 * CLVARLEN_ERROR_INTERNAL with MPI's error string (under MPI's default error
 * handler MPI aborts first). Nothing is written to any rank's outputs when any
 * rank's checks or local computation fail: the results go to work space, and
 * to the outputs only after every rank has reported success (a second small
 * MPI_Allreduce).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef CLVARLEN_MPI_H
#define CLVARLEN_MPI_H

#include <mpi.h>

#include <clvarlen/clvarlen.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The version of libclvarlen-mpi actually loaded (CLVARLEN_VERSION's encoding). */
CLVARLEN_API int clvarlen_mpi_version(void);

/** The message of the calling thread's last failed clvarlen_mpi_* call ("" if none); never NULL. */
CLVARLEN_API const char *clvarlen_mpi_last_error(void);

/** A CP attention group: the communicator, the documents, the shapes and this rank's plan. */
typedef struct clvarlen_mpi_cp clvarlen_mpi_cp;

/**
 * Creates a CP attention handle (collective over comm).
 *
 * cu_seqlens: int32 [n + 1], the documents of the whole (unsharded) batch,
 * identical on every rank; self-attention: queries and keys are the same
 * tokens. params: the attention's dtype, heads, head dims, scale, causal,
 * window, softcap and dropout, identical on every rank; its token strides
 * (q_stride, k_stride, v_stride, o_stride; 0 = contiguous) describe this
 * rank's local tensors. n_seqs, total_q, total_k and max_seqlen_q/_k are not
 * read: the handle sets them from cu_seqlens and the plan.
 *
 * The handle keeps the context (which must outlive it), a duplicate of comm,
 * a copy of cu_seqlens and this rank's plan (local_tokens rows).
 * Work space, allocated at the first call that needs it and kept until destroy:
 * the whole batch's K and V twice over in dtype (the gathered rows and the
 * rows in global order), and for the backward the whole batch's dk and dv
 * twice over in f32 plus this rank's dq in f32; on an OpenCL context the
 * device holds the global rows and host memory stages the exchange. On one
 * node the shared windows hold each rank's K|V rows and its f32 dk|dv of every
 * key (the node's shared memory: world x the whole batch's dk|dv).
 *
 * Errors: CLVARLEN_ERROR_INVALID_ARGUMENT (NULL context, handle pointer or
 * cu_seqlens, comm MPI_COMM_NULL or an intercommunicator, a params field out
 * of range as clvarlen_attention_forward documents it, or params / cu_seqlens
 * differing between ranks: every rank gets that error), 
 * CLVARLEN_ERROR_INVALID_CU_SEQLENS, CLVARLEN_ERROR_UNSUPPORTED (dtype, head
 * dim), CLVARLEN_ERROR_OVERFLOW (a rank's rows beyond what one MPI call
 * counts), CLVARLEN_ERROR_OUT_OF_MEMORY. On error *cp is not written.
 */
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_create(clvarlen_context *context, MPI_Comm comm,
                                                    const clvarlen_attention_params *params,
                                                    const int32_t *cu_seqlens, int64_t n,
                                                    clvarlen_mpi_cp **cp);
/** Frees the handle and its work space (collective: it frees the duplicated communicator). NULL is a no-op. */
CLVARLEN_API void clvarlen_mpi_cp_destroy(clvarlen_mpi_cp *cp);

/** This rank's token count (the plan's local_tokens): the rows of its q, k, v, o and gradients. */
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_local_tokens(const clvarlen_mpi_cp *cp,
                                                          int64_t *local_tokens);
/** This rank's local cu_seqlens [n + 1] and each local token's position in its
 * document [local_tokens] (either may be NULL), as clvarlen_cp_plan gives them. */
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_plan(const clvarlen_mpi_cp *cp,
                                                  int32_t *local_cu_seqlens, int32_t *position);

/** What the last forward or backward call on a handle moved and how long it took (this rank). */
typedef struct clvarlen_mpi_cp_stats {
    uint32_t struct_size;    /**< set by the caller to sizeof(clvarlen_mpi_cp_stats) */
    /** bytes this rank's data moved to the others: its K|V shard once per peer
     * (forward), the others' share of its dk|dv (backward) */
    int64_t bytes_sent;
    int64_t bytes_received;  /**< bytes of the other ranks' data this rank received */
    /** wall time of the exchange: the MPI calls, and on one node the host copies to and
     * from the shared window (waiting for slower ranks included) */
    double exchange_seconds;
    double compute_seconds;  /**< the rest: clvarlen compute and device transfers */
    double total_seconds;    /**< wall time of the whole call */
} clvarlen_mpi_cp_stats;
/** Copies the last call's figures (zeros before the first). stats->struct_size
 * must be at least the size of the first released struct. */
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_get_stats(const clvarlen_mpi_cp *cp,
                                                       clvarlen_mpi_cp_stats *stats);

/**
 * CP attention forward (collective). q [local_tokens, heads_q, head_dim],
 * k [local_tokens, heads_kv, head_dim], v [local_tokens, heads_kv,
 * head_dim_v]: this rank's shard (host memory, params' dtype and strides).
 * o [local_tokens, heads_q, head_dim_v] (dtype) and lse [heads_q,
 * local_tokens] (f32, may be NULL; the backward needs it): this rank's rows
 * of the unsharded attention's output. Dropout, when set, draws its mask from
 * the rank's local query index and the key's global index (SPEC 1.2: a CP run
 * does not equal the unsharded run with dropout on); the backward with the
 * same handle regenerates it. Works on every context, the OpenCL ones
 * included (host memory is staged by the core library).
 */
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_forward(clvarlen_mpi_cp *cp, const void *q,
                                                     const void *k, const void *v, void *o,
                                                     float *lse);

/**
 * CP attention backward (collective): from this rank's q, k, v, o, do
 * (layout of o with bwd->do_stride) and lse as the forward wrote them,
 * computes this rank's dq [local_tokens, heads_q, head_dim], and dk
 * [local_tokens, heads_kv, head_dim], dv [local_tokens, heads_kv, head_dim_v]
 * summed over every rank's queries (the gradient of this rank's keys and
 * values). bwd may be NULL (defaults); its strides describe dq, dk, dv and do
 * here; grad_f32 gives f32 gradients, else they are rounded once to dtype
 * after the sum. The ranks' sum runs in f32: on one node in rank order (0, 1,
 * ...), bitwise repeatable; across nodes in MPI_Reduce_scatter's order,
 * repeatable for the same world size and MPI library. Not across world sizes.
 */
CLVARLEN_API clvarlen_status clvarlen_mpi_cp_backward(clvarlen_mpi_cp *cp,
                                                      const clvarlen_attention_bwd_params *bwd,
                                                      const void *q, const void *k, const void *v,
                                                      const void *o, const void *dout,
                                                      const float *lse, void *dq, void *dk,
                                                      void *dv);

/* The same on device buffers, declared when <clvarlen/clvarlen-cl.h> is
 * included before this header. Each tensor is a cl_mem and a byte offset on
 * the handle's context's device; the calls block until the outputs are
 * written. The shards of K/V travel device -> pinned host memory -> MPI ->
 * pinned host memory -> device, where the rows are put in global order and the
 * attention runs on the device; the backward's dk/dv come back to host for
 * the reduction in f32 and go out to the owners' devices. On the CPU
 * fallback: CLVARLEN_ERROR_NO_OPENCL (on every rank). */
#ifdef CLVARLEN_CL_H
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
#endif

#ifdef __cplusplus
}
#endif

#endif /* CLVARLEN_MPI_H */
