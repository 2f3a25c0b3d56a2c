/* Fault injection: what the library does when things it depends on fail.
 *
 * - Allocation failure (tests/fault/fault-malloc.c): for N = 1, 2, ... the
 *   N-th allocation made by libclvarlen fails during one context's life
 *   (options, context, one op of each family: gather, pack, cp_plan,
 *   attention forward, gated delta; release), on the CPU fallback and on the
 *   OpenCL device, until a run completes with no allocation left to fail.
 *   Every status must be SUCCESS or OUT_OF_MEMORY (with a message), a failed
 *   op must leave its outputs as they were, the same op called again (no
 *   more injection) must succeed with the reference results, and a leak
 *   shows in the sanitizer build.
 * - Kernel files (OpenCL): CLVARLEN_KERNEL_PATH at a copy of cl/ with every
 *   program truncated, garbage or empty (KERNEL_BUILD), or a prelude missing
 *   (KERNEL_NOT_FOUND); a family file missing falls through to the source
 *   tree and works.
 * - Cache entries (OpenCL): swapped, truncated and garbage entries of every
 *   family's programs are rebuilt with the reference results.
 */
#include "kit-check.h"
#include "fault/fault-malloc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ one op of each family */

/* The outputs of every op, in one block so that "untouched" and "as the reference" are one
 * memcmp each. gdn_pool is read and written (the state pool). */
enum { G_ROWS = 9, G_ELEMS = 3, G_N = 7 };
enum { P_BATCH = 3, P_SEQ = 5, P_ELEMS = 4, P_CAP = 12 };
enum { C_N = 3, C_CAP = 16 };
enum { A_TQ = 7, A_TK = 9, A_HQ = 2, A_D = 16 };
enum { D_T = 5, D_HV = 2, D_K = 8, D_V = 8, D_SLOTS = 2 };

typedef struct outputs {
    float gather[G_N * G_ELEMS];
    float packed[P_CAP * P_ELEMS];
    int32_t pack_cu[P_BATCH + 1];
    int64_t pack_src[P_CAP], pack_total;
    int32_t cp_local_cu[C_N + 1], cp_head_cu[C_N + 1], cp_tail_cu[C_N + 1];
    int32_t cp_index[C_CAP], cp_position[C_CAP];
    int64_t cp_local_tokens;
    int32_t cp_max_head, cp_max_tail;
    float attn_o[A_TQ * A_HQ * A_D], attn_lse[A_HQ * A_TQ];
    float gdn_o[D_T * D_HV * D_V], gdn_pool[D_SLOTS * D_HV * D_V * D_K];
} outputs;

/* Outputs before a call: a pattern no op writes, and the gated delta pool's initial states. */
static void outputs_prepare(outputs *o)
{
    memset(o, 0xA5, sizeof *o);
    for (size_t i = 0; i < sizeof o->gdn_pool / sizeof o->gdn_pool[0]; i++)
        o->gdn_pool[i] = (float)((i * 37) % 23) * 0.01f - 0.1f;
}

/* Deterministic input values in [-1, 1). */
static float value(size_t i, unsigned salt)
{
    return (float)((i * 2654435761u + salt * 40503u) % 1000u) / 500.0f - 1.0f;
}

static clvarlen_status op_gather(clvarlen_context *ctx, outputs *o)
{
    float src[G_ROWS * G_ELEMS];
    for (size_t i = 0; i < G_ROWS * G_ELEMS; i++)
        src[i] = value(i, 1);
    static const int32_t index[G_N] = {8, -1, 0, 3, 3, 7, 1};
    return clvarlen_gather_rows(ctx, CLVARLEN_DTYPE_F32, G_ELEMS, src, G_ROWS, 0, index, G_N,
                                o->gather, 0);
}

static clvarlen_status op_pack(clvarlen_context *ctx, outputs *o)
{
    float padded[P_BATCH * P_SEQ * P_ELEMS];
    for (size_t i = 0; i < P_BATCH * P_SEQ * P_ELEMS; i++)
        padded[i] = value(i, 2);
    static const int32_t valid[P_BATCH] = {5, 0, 3};
    return clvarlen_pack(ctx, CLVARLEN_DTYPE_F32, P_ELEMS, padded, 0, P_BATCH, P_SEQ, valid,
                         P_CAP, o->packed, o->pack_cu, o->pack_src, &o->pack_total);
}

static clvarlen_status op_cp_plan(clvarlen_context *ctx, outputs *o)
{
    static const int32_t cu[C_N + 1] = {0, 5, 5, 13};
    clvarlen_cp_plan_out plan = {
        .local_cu_seqlens = o->cp_local_cu,
        .head_cu = o->cp_head_cu,
        .tail_cu = o->cp_tail_cu,
        .global_index = o->cp_index,
        .position = o->cp_position,
        .capacity = C_CAP,
        .local_tokens = o->cp_local_tokens,
        .max_head = o->cp_max_head,
        .max_tail = o->cp_max_tail,
    };
    clvarlen_status st = clvarlen_cp_plan(ctx, cu, C_N, 2, 1, &plan);
    o->cp_local_tokens = plan.local_tokens;
    o->cp_max_head = plan.max_head;
    o->cp_max_tail = plan.max_tail;
    return st;
}

static clvarlen_status op_attention(clvarlen_context *ctx, outputs *o)
{
    float q[A_TQ * A_HQ * A_D], k[A_TK * A_D], v[A_TK * A_D];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        q[i] = value(i, 3);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        k[i] = value(i, 4);
        v[i] = value(i, 5);
    }
    static const int32_t cu_q[3] = {0, 3, A_TQ}, cu_k[3] = {0, 5, A_TK};
    clvarlen_attention_params p;
    clvarlen_attention_params_init(&p);
    p.n_seqs = 2;
    p.total_q = A_TQ;
    p.total_k = A_TK;
    p.heads_q = A_HQ;
    p.heads_kv = 1;
    p.head_dim = A_D;
    p.causal = 1;
    return clvarlen_attention_forward(ctx, &p, q, k, v, cu_q, cu_k, NULL, o->attn_o,
                                      o->attn_lse);
}

static clvarlen_status op_gated_delta(clvarlen_context *ctx, outputs *o)
{
    float q[D_T * D_K], k[D_T * D_K], v[D_T * D_HV * D_V], a[D_T * D_HV], b[D_T * D_HV];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        q[i] = value(i, 6);
        k[i] = value(i, 7);
    }
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        v[i] = value(i, 8);
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        a[i] = value(i, 9);
        b[i] = value(i, 10);
    }
    static const float A_log[D_HV] = {-0.5f, 0.25f}, dt_bias[D_HV] = {0.1f, -0.2f};
    static const int32_t cu[3] = {0, 3, D_T}, slots[2] = {1, 0};
    clvarlen_gdn_params p;
    clvarlen_gdn_params_init(&p);
    p.n_seqs = 2;
    p.total_tokens = D_T;
    p.heads_qk = 1;
    p.heads_v = D_HV;
    p.key_dim = D_K;
    p.value_dim = D_V;
    p.state_slots = D_SLOTS;
    p.use_qk_l2norm = 1;
    return clvarlen_gated_delta_rule(ctx, &p, A_log, dt_bias, a, b, q, k, v, cu, o->gdn_pool,
                                     slots, NULL, NULL, o->gdn_o);
}

typedef struct op {
    const char *name;
    clvarlen_status (*run)(clvarlen_context *ctx, outputs *o);
} op;

static const op ops[] = {
    {"gather_rows", op_gather},         {"pack", op_pack},
    {"cp_plan", op_cp_plan},            {"attention_forward", op_attention},
    {"gated_delta_rule", op_gated_delta},
};
#define N_OPS (sizeof ops / sizeof ops[0])

/* ------------------------------------------------------------ contexts */

/* Options, then a context on device with the given cache directory and kernel path (NULL:
 * the test environment's); every status is returned, the first failure stops. */
static clvarlen_status make_context(const char *device, const char *cache, const char *kpath,
                                    clvarlen_context **ctx)
{
    *ctx = NULL;
    clvarlen_options *o = NULL;
    clvarlen_status st = clvarlen_options_create(&o);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_options_set_device(o, device);
    if (st == CLVARLEN_SUCCESS && cache)
        st = clvarlen_options_set_cache_dir(o, cache);
    if (st == CLVARLEN_SUCCESS && kpath)
        st = clvarlen_options_set_kernel_path(o, kpath);
    if (st == CLVARLEN_SUCCESS)
        st = clvarlen_context_create(o, ctx);
    clvarlen_options_destroy(o);
    return st;
}

/* Every op on a fresh context with no fault: ref[i] is the outputs block after op i alone. */
static void reference(const char *device, const char *cache, outputs ref[])
{
    clvarlen_context *ctx = NULL;
    clvarlen_status st = make_context(device, cache, NULL, &ctx);
    tu_check(st == CLVARLEN_SUCCESS, "context on %s: %s", device, clvarlen_last_error(NULL));
    for (size_t i = 0; i < N_OPS; i++) {
        outputs_prepare(&ref[i]);
        st = ops[i].run(ctx, &ref[i]);
        tu_check(st == CLVARLEN_SUCCESS, "%s on %s: %s (%s)", ops[i].name, device,
                 clvarlen_status_name(st), clvarlen_last_error(ctx));
    }
    clvarlen_context_destroy(ctx);
}

/* ------------------------------------------------------------ allocation failures */

typedef struct tally {
    long points;    /* allocation sites reached (N - 1 of the run that completed) */
    int oom;        /* injections reported as OUT_OF_MEMORY */
    int absorbed;   /* injections the library worked around (the run still succeeded) */
} tally;

/* The ops of one injected run on ctx; returns 1 when one reported OUT_OF_MEMORY. */
static int run_ops_injected(clvarlen_context *ctx, const outputs ref[], long n)
{
    int oom = 0;
    for (size_t i = 0; i < N_OPS; i++) {
        outputs got, before;
        outputs_prepare(&got);
        before = got;
        clvarlen_status st = ops[i].run(ctx, &got);
        if (st == CLVARLEN_SUCCESS) {
            tu_check(memcmp(&got, &ref[i], sizeof got) == 0, "N=%ld: %s: results differ", n,
                     ops[i].name);
            continue;
        }
        tu_check(st == CLVARLEN_ERROR_OUT_OF_MEMORY && fault_fired(),
                 "N=%ld: %s gave %s (%s), want OUT_OF_MEMORY", n, ops[i].name,
                 clvarlen_status_name(st), clvarlen_last_error(ctx));
        tu_check(clvarlen_last_error(ctx)[0] != '\0', "N=%ld: %s: no message", n, ops[i].name);
        tu_check(memcmp(&got, &before, sizeof got) == 0, "N=%ld: failed %s wrote its outputs",
                 n, ops[i].name);
        oom = 1;
        /* The one injection is spent: the same call must now work. */
        st = ops[i].run(ctx, &got);
        tu_check(st == CLVARLEN_SUCCESS, "N=%ld: %s after an OUT_OF_MEMORY: %s (%s)", n,
                 ops[i].name, clvarlen_status_name(st), clvarlen_last_error(ctx));
        tu_check(memcmp(&got, &ref[i], sizeof got) == 0, "N=%ld: %s after an OUT_OF_MEMORY: results "
                 "differ", n, ops[i].name);
    }
    return oom;
}

static tally inject_allocations(const char *device, const char *cache)
{
    outputs ref[N_OPS];
    reference(device, cache, ref);
    tally t = {0, 0, 0};
    for (long n = 1;; n++) {
        fault_arm(n);
        clvarlen_context *ctx = NULL;
        clvarlen_status st = make_context(device, cache, NULL, &ctx);
        int oom = 0;
        if (st == CLVARLEN_SUCCESS)
            oom = run_ops_injected(ctx, ref, n);
        else {
            tu_check(st == CLVARLEN_ERROR_OUT_OF_MEMORY && fault_fired(),
                     "N=%ld: context on %s: %s (%s), want OUT_OF_MEMORY", n, device,
                     clvarlen_status_name(st), clvarlen_last_error(NULL));
            tu_check(ctx == NULL, "N=%ld: a failed create returned a context", n);
            oom = 1;
        }
        clvarlen_context_destroy(ctx);
        fault_disarm();
        if (!fault_fired()) {
            t.points = n - 1;
            return t;
        }
        if (oom)
            t.oom++;
        else
            t.absorbed++;
        if (getenv("FAULT_TRACE")) /* after fault-malloc.c's backtrace of this injection */
            fprintf(stderr, "N=%ld: %s\n", n, oom ? "OUT_OF_MEMORY" : "absorbed");
    }
}

START_TEST(fault_alloc_cpu)
{
    tally t = inject_allocations("cpu", "off");
    printf("fault alloc cpu: %ld allocation points, %d OUT_OF_MEMORY, %d absorbed\n", t.points,
           t.oom, t.absorbed);
    tu_check(t.points > 5, "only %ld allocation points seen: is the interposer working?",
             t.points);
}
END_TEST

START_TEST(fault_alloc_cl)
{
    /* A private cache the reference run fills: the injected runs load from it, and a
     * failure while loading falls back to building (and storing) from source. */
    char *dir = tu_make_temp_dir("fault-cache");
    tally t = inject_allocations(tu_cl_device_spec(), dir);
    printf("fault alloc opencl: %ld allocation points, %d OUT_OF_MEMORY, %d absorbed\n",
           t.points, t.oom, t.absorbed);
    tu_check(t.points > 5, "only %ld allocation points seen", t.points);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------ kernel files */

static void source_cl_dir(char *out, size_t size)
{
    const char *src = getenv("CLVARLEN_SOURCE_DIR");
    tu_check(src && *src, "CLVARLEN_SOURCE_DIR is not set");
    snprintf(out, size, "%s/cl", src);
}

typedef enum doctor { DOCTOR_NONE, DOCTOR_TRUNCATE, DOCTOR_GARBAGE, DOCTOR_EMPTY } doctor;

/* A copy of cl/ in a fresh directory, every .cl file doctored; `drop` (may be NULL) left
 * out. */
static char *doctored_copy(doctor how, const char *drop)
{
    char from[2048];
    source_cl_dir(from, sizeof from);
    char *dir = tu_make_temp_dir("fault-kernels");
    DIR *d = opendir(from);
    tu_check(d != NULL, "cannot list %s", from);
    tu_rng r = tu_rng_make(11);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || (drop && strcmp(de->d_name, drop) == 0))
            continue;
        char src[2400], dst[2400];
        snprintf(src, sizeof src, "%s/%s", from, de->d_name);
        snprintf(dst, sizeof dst, "%s/%s", dir, de->d_name);
        size_t size = 0;
        char *data = tu_read_file(src, &size);
        tu_check(data != NULL, "cannot read %s", src);
        size_t len = strlen(de->d_name);
        if (len > 3 && strcmp(de->d_name + len - 3, ".cl") == 0) {
            if (how == DOCTOR_TRUNCATE)
                size /= 2;
            else if (how == DOCTOR_GARBAGE)
                tu_fill_random(&r, data, CLVARLEN_DTYPE_U8, size, 1.0);
            else if (how == DOCTOR_EMPTY)
                size = 0;
        }
        ck_assert_int_eq(tu_write_file(dst, data, size), 0);
        free(data);
    }
    closedir(d);
    return dir;
}

/* Every op on an OpenCL context with the cache directory and kernel path given (NULL: the
 * test environment's): each gives `want` with a message and untouched outputs, or succeeds
 * with the reference results (an op that ran without a kernel of doctored files). Returns
 * how many gave `want`. */
static int ops_expect(const char *cache, const char *kpath, clvarlen_status want,
                      const outputs ref[], const char *label)
{
    clvarlen_context *ctx = NULL;
    clvarlen_status st = make_context(tu_cl_device_spec(), cache, kpath, &ctx);
    tu_check(st == CLVARLEN_SUCCESS, "%s: context: %s", label, clvarlen_last_error(NULL));
    int failed = 0;
    for (size_t i = 0; i < N_OPS; i++) {
        outputs got, before;
        outputs_prepare(&got);
        before = got;
        st = ops[i].run(ctx, &got);
        if (st == CLVARLEN_SUCCESS) {
            tu_check(memcmp(&got, &ref[i], sizeof got) == 0, "%s: %s: results differ", label,
                     ops[i].name);
            continue;
        }
        tu_check(st == want, "%s: %s gave %s, want %s (%s)", label, ops[i].name,
                 clvarlen_status_name(st), clvarlen_status_name(want),
                 clvarlen_last_error(ctx));
        tu_check(strlen(clvarlen_last_error(ctx)) > 10, "%s: %s: no message", label,
                 ops[i].name);
        tu_check(memcmp(&got, &before, sizeof got) == 0, "%s: failed %s wrote its outputs",
                 label, ops[i].name);
        failed++;
    }
    clvarlen_context_destroy(ctx);
    return failed;
}

START_TEST(fault_kernel_files)
{
    outputs ref[N_OPS];
    reference(tu_cl_device_spec(), "off", ref);
    static const struct {
        doctor how;
        const char *drop;
        clvarlen_status want;
        const char *label;
    } cases[] = {
        {DOCTOR_TRUNCATE, NULL, CLVARLEN_ERROR_KERNEL_BUILD, "truncated .cl files"},
        {DOCTOR_GARBAGE, NULL, CLVARLEN_ERROR_KERNEL_BUILD, "garbage .cl files"},
        {DOCTOR_EMPTY, NULL, CLVARLEN_ERROR_KERNEL_BUILD, "empty .cl files"},
        {DOCTOR_NONE, "common.clh", CLVARLEN_ERROR_KERNEL_NOT_FOUND, "no common.clh"},
        {DOCTOR_NONE, "cv-shared.h", CLVARLEN_ERROR_KERNEL_NOT_FOUND, "no cv-shared.h"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *dir = doctored_copy(cases[c].how, cases[c].drop);
        int failed = ops_expect("off", dir, cases[c].want, ref, cases[c].label);
        tu_check(failed >= 3, "%s: only %d ops failed", cases[c].label, failed);
        tu_remove_tree(dir);
        free(dir);
    }
    /* Family files missing (preludes there): the search falls through to the source tree. */
    char *dir = tu_make_temp_dir("fault-kernels");
    char from[2048];
    source_cl_dir(from, sizeof from);
    static const char *const preludes[] = {"cv-shared.h", "common.clh"};
    for (size_t i = 0; i < 2; i++) {
        char src[2400], dst[2400];
        snprintf(src, sizeof src, "%s/%s", from, preludes[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, preludes[i]);
        size_t size = 0;
        char *data = tu_read_file(src, &size);
        ck_assert_ptr_nonnull(data);
        ck_assert_int_eq(tu_write_file(dst, data, size), 0);
        free(data);
    }
    ck_assert_int_eq(ops_expect("off", dir, CLVARLEN_SUCCESS, ref, "no family files"), 0);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------ cache entries */

typedef enum damage { DAMAGE_SWAP, DAMAGE_TRUNCATE, DAMAGE_GARBAGE } damage;

/* Damages every <key>.bin entry of dir; returns how many there are. */
static int damage_entries(const char *dir, damage how)
{
    char paths[64][1100];
    int n = 0;
    DIR *d = opendir(dir);
    tu_check(d != NULL, "cannot list %s", dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 64) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] != '.' && len > 4 && strcmp(de->d_name + len - 4, ".bin") == 0)
            snprintf(paths[n++], sizeof paths[0], "%s/%s", dir, de->d_name);
    }
    closedir(d);
    tu_rng r = tu_rng_make(5);
    char *first = NULL;
    size_t first_size = 0;
    for (int i = 0; i < n; i++) {
        size_t size = 0;
        char *data = tu_read_file(paths[i], &size);
        ck_assert_ptr_nonnull(data);
        if (how == DAMAGE_SWAP && i == 0) { /* rotate: entry i moves to name i - 1 */
            first = data;
            first_size = size;
            continue;
        }
        if (how == DAMAGE_TRUNCATE)
            size = size * 2 / 3;
        else if (how == DAMAGE_GARBAGE)
            tu_fill_random(&r, data, CLVARLEN_DTYPE_U8, size, 1.0);
        ck_assert_int_eq(tu_write_file(paths[how == DAMAGE_SWAP ? i - 1 : i], data, size), 0);
        free(data);
    }
    if (first) {
        ck_assert_int_eq(tu_write_file(paths[n - 1], first, first_size), 0);
        free(first);
    }
    return n;
}

START_TEST(fault_cache_entries)
{
    char *dir = tu_make_temp_dir("fault-cache");
    outputs ref[N_OPS];
    reference(tu_cl_device_spec(), dir, ref);
    static const char *const labels[] = {"swapped", "truncated", "garbage"};
    for (int how = DAMAGE_SWAP; how <= DAMAGE_GARBAGE; how++) {
        int n = damage_entries(dir, (damage)how);
        tu_check(n >= 3, "%s: only %d cache entries", labels[how], n);
        ck_assert_int_eq(ops_expect(dir, NULL, CLVARLEN_SUCCESS, ref, labels[how]), 0);
        /* ...and the entries were rewritten: a fresh context gets the same results. */
        outputs again[N_OPS];
        reference(tu_cl_device_spec(), dir, again);
        tu_check(memcmp(&again, &ref, sizeof ref) == 0, "%s: results differ after the rebuild",
                 labels[how]);
    }
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

int main(void)
{
    if (!fault_init()) {
        printf("libclvarlen is not a shared library here: allocation failures cannot be told "
               "apart; skipped\n");
        return TU_EXIT_SKIP;
    }
    Suite *s = suite_create("fault");
    TCase *cpu = tcase_create("cpu");
    tcase_set_timeout(cpu, 120);
    tcase_add_test(cpu, fault_alloc_cpu);
    suite_add_tcase(s, cpu);
    if (tu_probe_opencl_device()) {
        TCase *cl = tcase_create("opencl");
        tcase_set_timeout(cl, 600);
        tcase_add_test(cl, fault_alloc_cl);
        tcase_add_test(cl, fault_kernel_files);
        tcase_add_test(cl, fault_cache_entries);
        suite_add_tcase(s, cl);
    }
    return tu_run_suite(s);
}
