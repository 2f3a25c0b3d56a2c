#!/usr/bin/env python3
"""FlashAttention-4's paged KV-cache forward on the shapes of clvarlen-test's paged bench.

Runs on the GPU machine after the anchors are staged (../shared/gpu/README.md, "Running the
Python anchors beside clvarlen"); with `--clvarlen PATH` it first runs
`PATH bench --device nvidia --op paged-attention` so both sides come from one command.

Shapes (bf16, Hq 32, Hk 8, D 128, causal; pages of each row a random permutation, as the
clvarlen bench does): decode B 64 x 4096 tokens in pages of 16 and of 1, B 4 x 32768 (where
clvarlen splits the keys), verify 64 sequences x 4 draft tokens x 4096 as 256 rows of one
query (the seqlens_expanded form), and a chunk of 2048 queries on a 16384-token cache.
Reported like clvarlen's bench: time (median of CUDA events), KV bytes read per second (the
sum over rows of cache length x Hk x (D + Dv) x 2 bytes) and the ratio to the copy bandwidth
measured here (a device-to-device copy of 256 MiB, bytes read + written); prefill in TFLOP/s
(4 Lq Lk D Hq, halved for causal), as clvarlen counts it.
"""
import argparse
import inspect
import subprocess
import sys

import torch


def time_cuda(f, iters):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def copy_gbps():
    n = 256 << 20
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), 20)
    return 2 * n / t / 1e9


def make_rows(lens_q, lens_k, page, hq, hk, d, gen, share=1):
    """Queries packed by cu_seqlens_q; a cache whose pages every row visits in shuffled order.
    Rows b with the same b // share read the same pages (the draft tokens of one sequence in
    the seqlens_expanded form, as clvarlen_seqlens_expand's page table has them)."""
    pages_per_row = [(lk + page - 1) // page for lk in lens_k]
    seq_pages = [max(pages_per_row[s:s + share]) for s in range(0, len(lens_k), share)]
    num_pages = sum(seq_pages) + 1
    max_pages = max(pages_per_row)
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.zeros(len(lens_k), max_pages, dtype=torch.int32)
    at = 0
    for s, n in enumerate(seq_pages):
        for b in range(s * share, min(len(lens_k), (s + 1) * share)):
            table[b, :n] = perm[at:at + n].to(torch.int32)
        at += n
    cu = torch.zeros(len(lens_q) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lens_q, dtype=torch.int32), 0)
    tq = int(cu[-1])
    dev = "cuda"
    q = torch.randn(tq, hq, d, dtype=torch.bfloat16, device=dev)
    kc = torch.randn(num_pages, page, hk, d, dtype=torch.bfloat16, device=dev)
    vc = torch.randn(num_pages, page, hk, d, dtype=torch.bfloat16, device=dev)
    return dict(q=q, kc=kc, vc=vc, cu=cu.to(dev), table=table.to(dev),
                seqused=torch.tensor(lens_k, dtype=torch.int32, device=dev),
                max_q=max(lens_q), max_k=max(lens_k))


def call_fa4(fn, r, causal=True):
    params = inspect.signature(fn).parameters
    kw = dict(cu_seqlens_q=r["cu"], seqused_k=r["seqused"], page_table=r["table"],
              causal=causal)
    if "max_seqlen_q" in params:
        kw["max_seqlen_q"] = r["max_q"]
    if "cu_seqlens_k" in params:
        kw["cu_seqlens_k"] = None
    out = fn(r["q"], r["kc"], r["vc"], **kw)
    return out[0] if isinstance(out, tuple) else out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clvarlen", help="clvarlen-test binary: its paged bench runs first")
    ap.add_argument("--iters", type=int, default=25)
    args = ap.parse_args()
    if args.clvarlen:
        sys.stdout.flush()
        subprocess.run([args.clvarlen, "bench", "--device", "nvidia", "--op", "paged-attention"],
                       check=False)
        sys.stdout.flush()
    from flash_attn.cute.interface import flash_attn_varlen_func as fa4

    print("FA4 flash_attn_varlen_func" + str(inspect.signature(fa4))[:300])
    hq, hk, d = 32, 8, 128
    gen = torch.Generator().manual_seed(1)
    ceiling = copy_gbps()
    print(f"copy bandwidth (torch, read + write, 256 MiB): {ceiling:.1f} GB/s")
    shapes = [
        ("paged-decode-p16", [1] * 64, [4096] * 64, 16, 1),
        ("paged-decode-p1", [1] * 64, [4096] * 64, 1, 1),
        ("paged-decode-split", [1] * 4, [32768] * 4, 16, 1),
        ("paged-verify", [1] * 256, [4096 - 3 + i % 4 for i in range(256)], 16, 4),
        ("paged-prefill", [2048], [16384], 16, 1),
    ]
    for name, lq, lk, page, share in shapes:
        try:
            r = make_rows(lq, lk, page, hq, hk, d, gen, share)
            t = time_cuda(lambda: call_fa4(fa4, r), args.iters)
        except Exception as e:  # report and go on: one shape FA4 refuses must not hide the rest
            print(f"{name:22s} FA4 failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        if name == "paged-prefill":
            flops = 4.0 * lq[0] * lk[0] * d * hq / 2
            print(f"{name:22s} FA4 {t * 1e6:10.1f} us  {flops / t / 1e12:8.1f} TFLOP/s")
        else:
            kv = sum(lk) * hk * 2 * d * 2
            gbps = kv / t / 1e9
            print(f"{name:22s} FA4 {t * 1e6:10.1f} us  {gbps:9.1f} GB/s  {gbps / ceiling:5.2f} x copy")
        del r
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
