/* segment-gen.cl: gen_seq_lens (SPEC 2.6), joined after cv-shared.h and
 * common.clh; built with -cl-fp32-correctly-rounded-divide-sqrt.
 */
#pragma OPENCL FP_CONTRACT OFF


inline ulong cv_mix64(ulong x)
{
    ulong z = x + 0x9E3779B97F4A7C15UL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
    return z ^ (z >> 31);
}

inline float cv_gen_uniform(ulong seed, uint row, uint i)
{
    ulong h = cv_mix64(seed ^ cv_mix64(((ulong)row << 32) | (ulong)i));
    return (float)(uint)(h >> 40) * 0x1p-24f;
}

/*
 * One work-item per row. Bit-identical to the CPU only with correctly
 * rounded f32 division: the host builds this section with
 * -cl-fp32-correctly-rounded-divide-sqrt, and computes on the host instead
 * when the device cannot. FP_CONTRACT is off (top of file) so no product is
 * fused into an add.
 */
__kernel void segment_gen_seq_lens(ulong seed, int world, int n, int total, __global int *out,
                                   ulong out_off)
{
    int row = (int)get_global_id(0);
    if (row >= world)
        return;
    __global int *len = CV_PTR(int, out, out_off) + (long)row * n;
    float floor_add = 0.25f / (float)n;
    float sum = 0.0f;
    for (int i = 0; i < n; i++)
        sum = sum + (cv_gen_uniform(seed, (uint)row, (uint)i) + floor_add);
    float total_f = (float)total;
    long acc = 0;
    for (int i = 0; i < n; i++) {
        float ratio = (cv_gen_uniform(seed, (uint)row, (uint)i) + floor_add) / sum;
        float x = ratio * total_f;
        int v = (int)rint(x);
        len[i] = v;
        acc += v;
    }
    long last = (long)len[n - 1] - (acc - total);
    if (last >= 0) {
        len[n - 1] = (int)last;
        return;
    }
    len[n - 1] = 0;
    long deficit = -last;
    for (int i = n - 2; i >= 0 && deficit > 0; i--) {
        long take = min((long)len[i], deficit);
        len[i] = (int)(len[i] - take);
        deficit -= take;
    }
}

