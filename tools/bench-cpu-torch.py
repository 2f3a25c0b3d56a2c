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
halved for causal. The gated delta rule prefill (bf16, H 16, HV 32, K = V = 128,
q/k L2-normalised in the op, zero initial state) is compared with its chunked
form written in PyTorch here (torch_gdn_chunked, chunk 64); row gather and
scatter (4 KiB rows, a random permutation) with index_select and index_copy_
(GB/s counts the bytes read and written); gated delta decode (one token of N
sequences, f32 state [N, HV, V, K] in place) against the same step vectorised
over sequences and heads in PyTorch (GB/s: the state read and written). The time is the median of --runs runs after one warm-up.
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


# Gated delta rule prefill: H q/k heads, HV value heads, K = V = 128, bf16.
GDN_CASES = [
    # name, seqs, tokens
    ("gdn-prefill-4x1k", 4, 1024),
    ("gdn-prefill-16x4k", 16, 4096),
]
GDN_H, GDN_HV, GDN_K, GDN_V = 16, 32, 128, 128


def torch_gdn_chunked(q, k, v, g, beta, cu, chunk=64):
    """The chunked (WY / UT-transform) form of SPEC 3 in PyTorch, f32, one
    sequence at a time with all its chunks batched (only the state's pass
    over the chunks is a loop): q, k [T, HV, K] (heads already repeated,
    L2-normalised), v [T, HV, V], g (log decay) and beta [T, HV]. Zero initial
    state. Returns o [T, HV, V]."""
    scale = q.shape[-1] ** -0.5
    out = torch.empty_like(v)
    incl = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    strict = torch.ones(chunk, chunk, dtype=torch.bool).tril(-1)
    eye = torch.eye(chunk)
    F = torch.nn.functional
    for s in range(len(cu) - 1):
        a, b = int(cu[s]), int(cu[s + 1])
        L = b - a
        if L == 0:
            continue
        pad = (-L) % chunk
        # [C, HV, chunk, dim], contiguous per chunk; padded tokens have
        # k = v = q = 0, beta = 0 and g = 0, so they change nothing.
        def blocks(x):
            x = F.pad(x[a:b], (0, 0, 0, 0, 0, pad))
            return x.reshape(-1, chunk, x.shape[1], x.shape[2]).transpose(1, 2).contiguous()
        qc, kc, vc = blocks(q) * scale, blocks(k), blocks(v)
        gc = blocks(g[..., None])[..., 0].cumsum(-1)  # [C, HV, chunk]
        bc = blocks(beta[..., None])
        ratio = (gc[..., :, None] - gc[..., None, :]).masked_fill(~incl, float("-inf")).exp()
        # T = (I + A)^-1 with A = strictly-lower(beta K K^T * ratio), by forward
        # substitution a row at a time: row i of -A T's lower part.
        A = -((bc * kc) @ kc.transpose(-1, -2) * ratio).masked_fill(~strict, 0)
        for i in range(1, chunk):
            A[..., i, :i] = A[..., i, :i] + (A[..., i, :i, None] * A[..., :i, :i]).sum(-2)
        T = A + eye
        u = T @ (bc * vc)
        w = T @ (bc * kc * gc.exp()[..., None])
        attn = (qc @ kc.transpose(-1, -2) * ratio).masked_fill(~incl, 0)
        qg = qc * gc.exp()[..., None]
        kgt = (kc * (gc[..., -1:] - gc).exp()[..., None]).transpose(-1, -2).contiguous()
        glast = gc[..., -1].exp()[..., None, None]
        S = q.new_zeros(v.shape[1], q.shape[-1], v.shape[-1])  # [HV, K, V]
        o = torch.empty_like(vc)
        for c in range(qc.shape[0]):
            vnew = u[c] - w[c] @ S
            o[c] = qg[c] @ S + attn[c] @ vnew
            S = S * glast[c] + kgt[c] @ vnew
        out[a:b] = o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[-1])[:L]
    return out


def run_gdn(ctx, case, runs, seed):
    name, seqs, tokens = case
    lens = clvarlen.gen_seq_lens(seed, 1, seqs, tokens)[0]
    cu = np.zeros(seqs + 1, dtype=np.int32)
    cu[1:] = np.cumsum(lens)
    gen = torch.Generator().manual_seed(seed)
    H, HV, K, V = GDN_H, GDN_HV, GDN_K, GDN_V
    q = torch.randn(tokens, H, K, generator=gen).to(torch.bfloat16)
    k = torch.randn(tokens, H, K, generator=gen).to(torch.bfloat16)
    v = torch.randn(tokens, HV, V, generator=gen).to(torch.bfloat16)
    a = torch.randn(tokens, HV, generator=gen).to(torch.bfloat16)
    bb = torch.randn(tokens, HV, generator=gen).to(torch.bfloat16)
    A_log = torch.rand(HV, generator=gen) * 2 - 1
    dt_bias = torch.rand(HV, generator=gen) * 2 - 1
    state = torch.zeros(seqs, HV, V, K)
    out = torch.empty(tokens, HV, V, dtype=torch.bfloat16)
    cu_t = torch.from_numpy(cu)

    def cv():
        state.zero_()
        ctx.gated_delta_rule(q, k, v, a, bb, A_log, dt_bias, cu_t, state_pool=state,
                             use_qk_l2norm=True, out=out)

    ref = {}

    def th():
        rep = HV // H
        qf = torch.nn.functional.normalize(q.float(), dim=-1, eps=1e-6).repeat_interleave(rep, 1)
        kf = torch.nn.functional.normalize(k.float(), dim=-1, eps=1e-6).repeat_interleave(rep, 1)
        g = -A_log.exp() * torch.nn.functional.softplus(a.float() + dt_bias)
        beta = torch.sigmoid(bb.float())
        ref["o"] = torch_gdn_chunked(qf, kf, v.float(), g, beta, cu).to(torch.bfloat16)

    t_cv = timed(cv, runs)
    t_th = timed(th, runs)
    err = rel_l2(out, ref["o"])
    tok_cv, tok_th = tokens / t_cv, tokens / t_th
    print(f"{name:24s} clvarlen {t_cv * 1e3:9.2f} ms {tok_cv / 1e3:7.1f} ktok/s   "
          f"torch     {t_th * 1e3:9.2f} ms {tok_th / 1e3:7.1f} ktok/s   ratio {tok_cv / tok_th:5.2f}x   "
          f"rel_l2 {err:.1e}", flush=True)
    return err


def run_gdn_decode(ctx, n, runs, seed):
    """One token for each of n sequences, f32 state pool [n, HV, V, K] updated in
    place; PyTorch: the same step vectorised over the sequences and heads."""
    gen = torch.Generator().manual_seed(seed)
    H, HV, K, V = GDN_H, GDN_HV, GDN_K, GDN_V
    q = torch.randn(n, H, K, generator=gen).to(torch.bfloat16)
    k = torch.randn(n, H, K, generator=gen).to(torch.bfloat16)
    v = torch.randn(n, HV, V, generator=gen).to(torch.bfloat16)
    a = torch.randn(n, HV, generator=gen).to(torch.bfloat16)
    bb = torch.randn(n, HV, generator=gen).to(torch.bfloat16)
    A_log = torch.rand(HV, generator=gen) * 2 - 1
    dt_bias = torch.rand(HV, generator=gen) * 2 - 1
    state0 = torch.randn(n, HV, V, K, generator=gen) * 0.1
    st_cv, st_th = state0.clone(), state0.clone()
    out = torch.empty(n, HV, V, dtype=torch.bfloat16)
    cu = torch.arange(n + 1, dtype=torch.int32)
    rep = HV // H
    ref = {}

    def cv():
        ctx.gated_delta_rule(q, k, v, a, bb, A_log, dt_bias, cu, state_pool=st_cv,
                             use_qk_l2norm=True, out=out)

    def th():
        qf = torch.nn.functional.normalize(q.float(), dim=-1, eps=1e-6).repeat_interleave(rep, 1)
        kf = torch.nn.functional.normalize(k.float(), dim=-1, eps=1e-6).repeat_interleave(rep, 1)
        g = (-A_log.exp() * torch.nn.functional.softplus(a.float() + dt_bias)).exp()
        beta = torch.sigmoid(bb.float())
        st_th.mul_(g[..., None, None])
        u = beta[..., None] * (v.float() - (st_th @ kf[..., None])[..., 0])
        st_th.add_(u[..., None] * kf[..., None, :])
        ref["o"] = ((st_th @ qf[..., None])[..., 0] * K ** -0.5).to(torch.bfloat16)

    cv()
    th()
    err = rel_l2(out, ref["o"])  # one step from the same state
    t_cv = timed(cv, runs)
    t_th = timed(th, runs)
    gb = 2.0 * state0.numel() * 4 * 1e-9  # state read and written
    name = f"gdn-decode-n{n}"
    print(f"{name:24s} clvarlen {t_cv * 1e3:9.3f} ms {gb / t_cv:7.1f} GB/s     "
          f"torch     {t_th * 1e3:9.3f} ms {gb / t_th:7.1f} GB/s     ratio {t_th / t_cv:5.2f}x   "
          f"rel_l2 {err:.1e}", flush=True)
    return err


# Row gather / scatter: 4 KiB rows (1024 f32), a random permutation of the rows.
ROW_CASES = [
    # name, rows
    ("gather-4k-rows", 65536),
    ("scatter-4k-rows", 65536),
]


def run_rows(ctx, case, runs, seed):
    name, rows = case
    gen = torch.Generator().manual_seed(seed)
    src = torch.randn(rows, 1024, generator=gen)
    idx = torch.randperm(rows, generator=gen).to(torch.int32)
    idx64 = idx.to(torch.int64)
    out_cv = torch.empty_like(src)
    out_th = torch.empty_like(src)
    if name.startswith("gather"):
        def cv():
            ctx.gather_rows(src, idx, out=out_cv)

        def th():
            torch.index_select(src, 0, idx64, out=out_th)
    else:
        def cv():
            ctx.scatter_rows(src, idx, out_cv, unique_indices=True)

        def th():
            out_th.index_copy_(0, idx64, src)
    t_cv = timed(cv, runs)
    t_th = timed(th, runs)
    err = rel_l2(out_cv, out_th)
    gb = 2.0 * src.numel() * 4 * 1e-9
    print(f"{name:24s} clvarlen {t_cv * 1e3:9.2f} ms {gb / t_cv:7.1f} GB/s     "
          f"torch     {t_th * 1e3:9.2f} ms {gb / t_th:7.1f} GB/s     ratio {t_th / t_cv:5.2f}x   "
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
        for case in ROW_CASES:
            if args.case in case[0] and not run_rows(ctx, case, args.runs, args.seed) == 0.0:
                print(f"  {case[0]}: outputs differ", file=sys.stderr)
                bad += 1
        for case in GDN_CASES:
            if args.case in case[0] and not run_gdn(ctx, case, args.runs, args.seed) <= 2e-2:
                print(f"  {case[0]}: outputs differ beyond 2e-2", file=sys.stderr)
                bad += 1
        for n in (32, 256):
            if args.case in f"gdn-decode-n{n}" and \
                    not run_gdn_decode(ctx, n, args.runs, args.seed) <= 2e-2:
                print(f"  gdn-decode-n{n}: outputs differ beyond 2e-2", file=sys.stderr)
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
