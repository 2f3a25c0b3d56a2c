#!/usr/bin/env python3
"""The gated delta rule prefill anchors beside clvarlen's benchmark.

Times FlashInfer's Hopper chunk kernel (flashinfer.gdn_prefill.chunk_gated_delta_rule)
and fla-core's Triton chunk kernel (fla.ops.gated_delta_rule.chunk_gated_delta_rule) on
the batches `clvarlen-test bench --op gated-delta` times: the same lengths (clvarlen's
own gen_seq_lens, seed 1, called through the built library), H 16, HV 32, K = V = 128,
bf16 q/k/v, f32 gates, L2 norm of q and k in the kernel, an initial state per sequence
and the final state written. Values are random (never zeros); the anchors' gate
conventions differ (FlashInfer takes the decay alpha = exp(g), fla the log decay g) and
are fed the same decays. Run it in the same command as the clvarlen benchmark:

    python3 tools/bench-gdn-anchors.py --lib build-gpu/lib/libclvarlen.so

Prints one line per case and library: the median time of 20 runs after 5 warm-ups
(CUDA events), and FlashInfer's relative difference from fla on the output. Then
decode: FlashInfer's single-token kernel (gated_delta_rule_decode_pretranspose, f32
state [N, HV, V, K], the layout clvarlen's bench uses) for N = 256 and 1024, with its
state bandwidth (read + written) against a device-to-device copy timed the same way.
"""
import argparse
import ctypes
import sys

import torch

CASES = [(16, 16384), (64, 8192), (4, 32768), (256, 65536)]
H, HV, K, V = 16, 32, 128, 128


def gen_seq_lens(lib_path, n, total):
    lib = ctypes.CDLL(lib_path)
    opts = ctypes.c_void_p()
    ctx = ctypes.c_void_p()
    if lib.clvarlen_options_create(ctypes.byref(opts)) != 0:
        sys.exit("clvarlen_options_create failed")
    lib.clvarlen_options_set_device(opts, b"cpu")
    if lib.clvarlen_context_create(opts, ctypes.byref(ctx)) != 0:
        sys.exit("clvarlen_context_create failed")
    lib.clvarlen_options_destroy(opts)
    out = (ctypes.c_int32 * n)()
    st = lib.clvarlen_gen_seq_lens(ctx, ctypes.c_uint64(1), ctypes.c_int32(1),
                                   ctypes.c_int32(n), ctypes.c_int64(total), out)
    lib.clvarlen_context_destroy(ctx)
    if st != 0:
        sys.exit("clvarlen_gen_seq_lens failed: %d" % st)
    return list(out)


def time_ms(fn, warmup=5, reps=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="libclvarlen.so (for gen_seq_lens)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    try:
        from flashinfer.gdn_prefill import chunk_gated_delta_rule as fi_chunk
    except Exception as e:  # noqa: BLE001 - report and go on with fla
        print("flashinfer unavailable: %s" % e)
        fi_chunk = None
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk
    except Exception as e:  # noqa: BLE001
        print("fla unavailable: %s" % e)
        fla_chunk = None
    print("gdn anchors: H %d HV %d K %d V %d bf16, f32 gates and states, L2 norm" % (H, HV, K, V))
    for n, total in CASES:
        lens = gen_seq_lens(args.lib, n, total)
        cu = torch.zeros(n + 1, dtype=torch.int64)
        cu[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int64), 0)
        cu = cu.to(dev)
        T = total
        q = torch.randn(T, H, K, device=dev, dtype=torch.bfloat16)
        k = torch.randn(T, H, K, device=dev, dtype=torch.bfloat16)
        v = torch.randn(T, HV, V, device=dev, dtype=torch.bfloat16)
        # log decay in about [-0.5, -0.01], beta in (0, 1): the ranges of real gates
        g = -(torch.rand(T, HV, device=dev) * 0.49 + 0.01)
        beta = torch.sigmoid(torch.randn(T, HV, device=dev))
        s0 = torch.randn(n, HV, K, V, device=dev) * 0.1  # [N, HV, K, V]
        scale = K ** -0.5
        label = "prefill %d seqs %d tok (max %d)" % (n, total, max(lens))
        o_fla = o_fi = None
        if fla_chunk is not None:
            def run_fla():
                return fla_chunk(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                 g.unsqueeze(0), beta.unsqueeze(0), scale=scale,
                                 initial_state=s0, output_final_state=True,
                                 cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
            o_fla = run_fla()[0].squeeze(0).float()
            print("%-44s fla chunk        %8.3f ms" % (label, time_ms(run_fla)))
        if fi_chunk is not None:
            alpha = torch.exp(g).contiguous()
            s0_vk = s0.transpose(-1, -2).contiguous()  # FlashInfer: [N, HV, V, K]

            def run_fi():
                return fi_chunk(q, k, v, g=alpha, beta=beta, scale=scale,
                                initial_state=s0_vk, output_final_state=True,
                                cu_seqlens=cu, use_qk_l2norm_in_kernel=True)
            o_fi = run_fi()[0].float()
            print("%-44s flashinfer sm90  %8.3f ms" % (label, time_ms(run_fi)))
        if o_fla is not None and o_fi is not None:
            rel = ((o_fi - o_fla).norm() / o_fla.norm()).item()
            print("%-44s flashinfer vs fla output rel. diff %.2e" % (label, rel))
    decode_anchor(dev)


def decode_anchor(dev):
    """FlashInfer's decode beside `clvarlen-test bench` decode lines (N 1, 256, 1024)."""
    try:
        from flashinfer.gdn_decode import gated_delta_rule_decode_pretranspose as fi_decode
    except Exception as e:  # noqa: BLE001
        print("flashinfer decode unavailable: %s" % e)
        return
    src = torch.empty(256 << 20, dtype=torch.float32, device=dev)  # 1 GiB
    dst = torch.empty_like(src)
    t_copy = time_ms(lambda: dst.copy_(src))
    copy_gbps = 2 * src.numel() * 4 / (t_copy * 1e-3) / 1e9
    print("copy (device to device, 1 GiB)             %8.3f ms  %.0f GB/s" % (t_copy, copy_gbps))
    del src, dst
    for n in (1, 256, 1024):
        q = torch.randn(n, 1, H, K, device=dev, dtype=torch.bfloat16)
        k = torch.randn(n, 1, H, K, device=dev, dtype=torch.bfloat16)
        v = torch.randn(n, 1, HV, V, device=dev, dtype=torch.bfloat16)
        a = torch.randn(n, 1, HV, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, 1, HV, device=dev, dtype=torch.bfloat16)
        A_log = torch.rand(HV, device=dev, dtype=torch.float32)
        dt_bias = torch.rand(HV, device=dev, dtype=torch.float32)
        state = torch.randn(n, HV, V, K, device=dev, dtype=torch.float32) * 0.1
        try:
            def run():
                return fi_decode(q, k, v, state, A_log, a, dt_bias, b, scale=K ** -0.5,
                                 use_qk_l2norm=True)
            t = time_ms(run)
        except Exception as e:  # noqa: BLE001
            print("flashinfer decode N %d failed: %s" % (n, e))
            continue
        gbps = 2 * state.numel() * 4 / (t * 1e-3) / 1e9
        print("decode N %-5d flashinfer sm90          %8.1f us  %.0f GB/s  %.2f x copy"
              % (n, t * 1e3, gbps, gbps / copy_gbps))


if __name__ == "__main__":
    main()
