/* Device profiles and the capability gate of the NVIDIA-only kernels (issue 17,
 * docs/PORTABILITY.md). CLVARLEN_DEVICE_PROFILE makes a context on the OpenCL
 * device of this machine describe itself as an AMD, Intel or generic GPU, so
 * the device table and the launchers choose that device's kernels; with
 * CLVARLEN_SOURCE_DUMP every program built is kept with its options. For each
 * non-NVIDIA profile, building every op in the shape the NVIDIA tensor-core
 * paths take (bf16, head dim 128) builds no NVIDIA kernel file and no program
 * with inline PTX (-DCV_NV_PTX, -DCV_NV_SHFL); forced to the tensor-core
 * attention kernel (CLVARLEN_ATTENTION_KERNEL=mma), the same profile builds
 * that kernel's file, still without PTX (the check sees such a file when there
 * is one). An unknown profile fails context creation.
 */
#include "kit-check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const profiles[] = {"amd-gfx90a", "amd-gfx1100", "intel-xe-hpg",
                                       "intel-xe-hpc", "generic"};
#define N_PROFILES (sizeof profiles / sizeof profiles[0])

/* The files only an NVIDIA device with compute capability 8.0 gets. */
static const char *const nv_files[] = {"attention-nv-", "attention-bwd-nv-",
                                       "attention-paged-nv-", "gated-delta-mma-",
                                       "gated-delta-scan-"};

/* The first line of a dumped program (lib/runtime/kernel-source.c). */
#define OPTIONS_MARK "// clvarlen-build-options: "

typedef struct dump_scan {
    int programs, nv_files, ptx_options;
    char example[512];
} dump_scan;

static void scan_dump(const char *dir, dump_scan *s)
{
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        s->programs++;
        for (size_t i = 0; i < sizeof nv_files / sizeof nv_files[0]; i++)
            if (strncmp(e->d_name, nv_files[i], strlen(nv_files[i])) == 0) {
                s->nv_files++;
                snprintf(s->example, sizeof s->example, "%.200s", e->d_name);
            }
        char path[4096], first[1024] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        if (!fgets(first, sizeof first, f))
            first[0] = '\0';
        fclose(f);
        ck_assert_msg(strncmp(first, OPTIONS_MARK, strlen(OPTIONS_MARK)) == 0, "%s: %s", path,
                      first);
        if (strstr(first, "-DCV_NV_PTX") || strstr(first, "-DCV_NV_SHFL")) {
            s->ptx_options++;
            snprintf(s->example, sizeof s->example, "%.200s: %.300s", e->d_name, first);
        }
        remove(path);
    }
    closedir(d);
}

/* Builds the ops (CLVARLEN_PRECOMPILE_* bits) for bf16 and head dim 128 under
 * the profile; scans the dump. 4 query heads to 1 key/value head pick the same
 * programs as the precompile's default 32 to 8 (the same grouped-query form),
 * and its tiny runs on PoCL's unoptimised kernels take a sixth of the time. */
static void build_as(const char *profile, const char *dir, unsigned ops, dump_scan *s)
{
    setenv("CLVARLEN_DEVICE_PROFILE", profile, 1);
    setenv("CLVARLEN_SOURCE_DUMP", dir, 1);
    clvarlen_context *ctx = tu_cl_context();
    clvarlen_device_info info;
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    ck_assert_int_ne(info.vendor, CLVARLEN_VENDOR_NVIDIA);
    ck_assert_int_eq(info.cc_major, 0);
    clvarlen_precompile_params p;
    clvarlen_precompile_params_init(&p);
    p.dtypes[0] = CLVARLEN_DTYPE_BF16;
    p.n_dtypes = 1;
    p.head_dims[0] = 128;
    p.n_head_dims = 1;
    p.heads_q = 4;
    p.heads_kv = 1;
    p.ops = ops;
    clvarlen_status st = clvarlen_context_precompile(ctx, &p);
    ck_assert_msg(st == CLVARLEN_SUCCESS, "%s: %s", profile, clvarlen_last_error(ctx));
    clvarlen_context_destroy(ctx);
    unsetenv("CLVARLEN_SOURCE_DUMP");
    unsetenv("CLVARLEN_DEVICE_PROFILE");
    scan_dump(dir, s);
}

START_TEST(non_nvidia_profiles_never_get_ptx)
{
    char *dir = tu_make_temp_dir("profile-dump");
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    unsetenv("CLVARLEN_GDN_TUNING");
    dump_scan s;
    build_as(profiles[_i], dir, 0, &s); /* every op */
    ck_assert_msg(s.programs >= 5, "%s: only %d programs built", profiles[_i], s.programs);
    ck_assert_msg(s.nv_files == 0 && s.ptx_options == 0,
                  "%s got an NVIDIA-only kernel: %s", profiles[_i], s.example);
    /* The control: forced to the tensor-core attention kernel, its file is
     * built (emulated) and seen, and still without inline PTX. The ops it
     * steers are the attention ops. */
    setenv("CLVARLEN_ATTENTION_KERNEL", "mma", 1);
    build_as(profiles[_i], dir,
             CLVARLEN_PRECOMPILE_ATTENTION | CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD |
                 CLVARLEN_PRECOMPILE_PAGED,
             &s);
    unsetenv("CLVARLEN_ATTENTION_KERNEL");
    ck_assert_msg(s.nv_files > 0, "%s: the forced tensor-core kernel was not seen",
                  profiles[_i]);
    ck_assert_msg(s.ptx_options == 0, "%s: PTX in the emulated kernel: %s", profiles[_i],
                  s.example);
    tu_remove_tree(dir);
    free(dir);
}
END_TEST

START_TEST(profile_describes_the_device)
{
    setenv("CLVARLEN_DEVICE_PROFILE", "intel-xe-hpc", 1);
    clvarlen_context *ctx = tu_cl_context();
    clvarlen_device_info info;
    ck_assert_int_eq(clvarlen_context_device(ctx, &info), CLVARLEN_SUCCESS);
    ck_assert_int_eq(info.vendor, CLVARLEN_VENDOR_INTEL);
    ck_assert_uint_eq(info.local_mem_bytes, 131072);
    ck_assert_uint_eq(info.max_work_group_size, 1024);
    ck_assert_msg(strstr(info.device_name, "Max 1550") != NULL, "%s", info.device_name);
    clvarlen_context_destroy(ctx);
    unsetenv("CLVARLEN_DEVICE_PROFILE");
}
END_TEST

START_TEST(unknown_profile_fails)
{
    setenv("CLVARLEN_DEVICE_PROFILE", "amd-gfx9999", 1);
    clvarlen_options *opt = NULL;
    ck_assert_int_eq(clvarlen_options_create(&opt), CLVARLEN_SUCCESS);
    ck_assert_int_eq(clvarlen_options_set_device(opt, tu_cl_device_spec()), CLVARLEN_SUCCESS);
    clvarlen_context *ctx = (clvarlen_context *)&opt; /* must stay untouched */
    clvarlen_context *const before = ctx;
    clvarlen_status st = clvarlen_context_create(opt, &ctx);
    clvarlen_options_destroy(opt);
    unsetenv("CLVARLEN_DEVICE_PROFILE");
    ck_assert_msg(st == CLVARLEN_ERROR_INVALID_ARGUMENT, "got %s", clvarlen_status_name(st));
    ck_assert_ptr_eq(ctx, before);
    const char *msg = clvarlen_last_error(NULL);
    ck_assert_msg(strstr(msg, "amd-gfx9999") && strstr(msg, "intel-xe-hpg"), "%s", msg);
}
END_TEST

int main(void)
{
    if (!tu_probe_opencl_device())
        return TU_EXIT_SKIP;
    Suite *s = suite_create("device-profile");
    TCase *tc = tcase_create("device-profile");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, unknown_profile_fails);
    tcase_add_test(tc, profile_describes_the_device);
    tcase_add_loop_test(tc, non_nvidia_profiles_never_get_ptx, 0, (int)N_PROFILES);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
