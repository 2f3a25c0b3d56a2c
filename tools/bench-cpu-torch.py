#!/usr/bin/env python3
"""Side-by-side of clvarlen's CPU fallback with PyTorch on the CPU, in one process.

For exploration only (issue 15): CI and the library never need PyTorch from PyPI.
Both sides get the same tensors and the same number of threads:

    PYTHONPATH=build/python python3 tools/bench-cpu-torch.py --threads 2

clvarlen runs through its Python package (build/python) on the CPU fallback
(device "cpu"); PyTorch runs torch.nn.functional.scaled_dot_product_attention
once per sequence (its CPU flash kernel; GQA by enable_gqa, or by repeating
K/V heads where that keyword is missing). Lengths come from clvarlen's
gen_seq_lens. Each side's output is compared with the other's (relative L2).
FLOPs are counted as tools/ops/attention.c does: 4 * sum(L^2) * D * Hq,
halved for causal. The time is the median of --runs runs after one warm-up.
Prints one line per case and the ratio clvarlen / PyTorch (above 1: clvarlen
faster).
"""
import argparse
import statistics
import sys
import time

import numpy as np
import torch

import clvarlen

CASES = [
    # name, dtype, seqs, tokens, Hq, Hk, D, causal
    ("attn-f32-8x2k", "f32", 8, 2048, 8, 2, 128, False),
    ("attn-f32-8x2k-causal", "f32", 8, 2048, 8, 2, 128, True),
    ("attn-bf16-8x2k", "bf16", 8, 2048, 8, 2, 128, False),
    ("attn-bf16-8x2k-causal", "bf16", 8, 2048, 8, 2, 128, True),
]


def timed(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def torch_attention(q, k, v, cu, causal, hq, hk):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    outs = []
    for s in range(len(cu) - 1):
        a, b = int(cu[s]), int(cu[s + 1])
        if a == b:
            outs.append(q.new_zeros((0, hq, v.shape[2])))
            continue
        qs = q[a:b].transpose(0, 1).unsqueeze(0)
        ks = k[a:b].transpose(0, 1).unsqueeze(0)
        vs = v[a:b].transpose(0, 1).unsqueeze(0)
        try:
            o = sdpa(qs, ks, vs, is_causal=causal, enable_gqa=True)
        except TypeError:  # PyTorch before 2.5
            ks = ks.repeat_interleave(hq // hk, dim=1)
            vs = vs.repeat_interleave(hq // hk, dim=1)
            o = sdpa(qs, ks, vs, is_causal=causal)
        outs.append(o.squeeze(0).transpose(0, 1))
    return torch.cat(outs, 0)


def rel_l2(a, b):
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    n = torch.linalg.vector_norm(b)
    return float(torch.linalg.vector_norm(a - b) / (n if n > 0 else 1.0))


def run_case(ctx, case, runs, seed):
    name, dt, seqs, tokens, hq, hk, d, causal = case
    lens = clvarlen.gen_seq_lens(seed, 1, seqs, tokens)[0]
    cu = np.zeros(seqs + 1, dtype=np.int32)
    cu[1:] = np.cumsum(lens)
    g = torch.Generator().manual_seed(seed)
    tdt = torch.float32 if dt == "f32" else torch.bfloat16
    q = torch.randn(tokens, hq, d, generator=g).to(tdt)
    k = torch.randn(tokens, hk, d, generator=g).to(tdt)
    v = torch.randn(tokens, hk, d, generator=g).to(tdt)
    out = torch.empty(tokens, hq, d, dtype=tdt)
    cu_t = torch.from_numpy(cu)

    def cv():
        ctx.attention_forward(q, k, v, cu_t, causal=causal, out=out)

    ref = {}

    def th():
        ref["o"] = torch_attention(q, k, v, cu, causal, hq, hk)

    t_cv = timed(cv, runs)
    t_th = timed(th, runs)
    flops = 4.0 * float(np.sum(lens.astype(np.float64) ** 2)) * d * hq
    if causal:
        flops /= 2
    err = rel_l2(out, ref["o"])
    gf_cv, gf_th = flops / t_cv * 1e-9, flops / t_th * 1e-9
    print(f"{name:24s} clvarlen {t_cv * 1e3:9.2f} ms {gf_cv:7.1f} GFLOP/s   "
          f"torch {t_th * 1e3:9.2f} ms {gf_th:7.1f} GFLOP/s   ratio {gf_cv / gf_th:5.2f}x   "
          f"rel_l2 {err:.1e}", flush=True)
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--case", default="", help="only cases whose name contains this")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__} ({args.threads} threads), clvarlen {clvarlen.version}, "
          f"CPU ISA {torch.backends.cpu.get_cpu_capability()}")
    bad = 0
    with clvarlen.Context("cpu", threads=args.threads) as ctx:
        for case in CASES:
            if args.case in case[0]:
                tol = 1e-4 if case[1] == "f32" else 2e-2
                if not run_case(ctx, case, args.runs, args.seed) <= tol:
                    print(f"  {case[0]}: outputs differ beyond {tol}", file=sys.stderr)
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
