/* Device selection over the OpenCL devices of this machine (it loads the
 * OpenCL ICD loader and its drivers, so it is an OpenCL test: suite opencl,
 * outside the valgrind run of the CPU suite). Without any OpenCL device it
 * checks the CPU-fallback answers. */
#include "kit-check.h"

#include <stdlib.h>
#include <string.h>

/* The default order (issue 15): GPUs and accelerators, else the CPU fallback;
 * an OpenCL CPU device (PoCL) only when named or through "opencl", which
 * takes the best OpenCL device of any kind but Mesa's llvmpipe. */
START_TEST(device_default_order)
{
    unsetenv("CLVARLEN_DEVICE");
    size_t n = 0;
    ck_assert_int_eq(clvarlen_device_count(&n), CLVARLEN_SUCCESS);
    int any_gpu = 0, any_cl = 0;
    for (size_t i = 0; i < n; i++) {
        clvarlen_device_info d;
        ck_assert_int_eq(clvarlen_device_query((int)i, &d), CLVARLEN_SUCCESS);
        int llvmpipe = strstr(d.device_name, "llvmpipe") != NULL;
        any_gpu |= !llvmpipe && d.kind != CLVARLEN_DEVICE_OPENCL_CPU;
        any_cl |= !llvmpipe;
    }
    int index = 7;
    char reason[400] = "";
    ck_assert_int_eq(clvarlen_device_select(NULL, &index, reason, sizeof reason),
                     CLVARLEN_SUCCESS);
    tu_check(reason[0] != '\0', "no reason");
    if (any_gpu) {
        clvarlen_device_info d;
        ck_assert_int_ge(index, 0);
        ck_assert_int_eq(clvarlen_device_query(index, &d), CLVARLEN_SUCCESS);
        tu_check(d.kind != CLVARLEN_DEVICE_OPENCL_CPU, "default is the OpenCL CPU device %s",
                 d.device_name);
    } else {
        tu_check(index == -1, "default index %d without a GPU (%s)", index, reason);
    }
    for (int k = 0; k < 2; k++) {
        index = 7;
        clvarlen_status st =
            clvarlen_device_select(k ? "OpenCL" : "opencl", &index, reason, sizeof reason);
        if (!any_cl) {
            ck_assert_int_eq(st, CLVARLEN_ERROR_DEVICE_NOT_FOUND);
            continue;
        }
        ck_assert_int_eq(st, CLVARLEN_SUCCESS);
        clvarlen_device_info d;
        ck_assert_int_ge(index, 0);
        ck_assert_int_eq(clvarlen_device_query(index, &d), CLVARLEN_SUCCESS);
        tu_check(strstr(d.device_name, "llvmpipe") == NULL, "'opencl' chose llvmpipe");
        tu_check(any_gpu || d.kind == CLVARLEN_DEVICE_OPENCL_CPU, "'opencl' chose kind %d",
                 (int)d.kind);
        tu_check(strstr(reason, "opencl") != NULL, "reason: %s", reason);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device-select");
    TCase *tc = tcase_create("device-select");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, device_default_order);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
