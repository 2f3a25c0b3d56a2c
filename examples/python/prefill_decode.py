#!/usr/bin/env python3
"""One attention layer serving a varlen batch: prefill, then decode over a paged KV cache.

The prompts' lengths come from gen_seq_lens (the seeds' generator). Prefill runs varlen
attention on the packed prompts and writes their K/V into a paged cache; each decode step
appends one token per sequence and runs paged attention. The last step is checked against
contiguous attention over the same keys.

    python3 prefill_decode.py [--device cpu|pocl|NAME|INDEX] [--dtype f32|bf16]
"""
import argparse
import sys

import numpy as np

import clvarlen


def to_dtype(x, dtype):
    if dtype == "bf16":
        f = np.ascontiguousarray(x, np.float32).view(np.uint32)
        return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    hq, hk, d, page = 8, 2, 64, 16
    rng = np.random.default_rng(0)
    new = lambda *shape: to_dtype(rng.standard_normal(shape), args.dtype)  # noqa: E731

    with clvarlen.Context(device=args.device) as ctx:
        print("device:", ctx.device.name)
        lens = clvarlen.gen_seq_lens(seed=7, world=1, n=6, total=300)[0]
        cu = ctx.cu_seqlens_from_lengths(lens)
        b, total = len(lens), int(cu[-1])
        # prefill: causal varlen attention over the packed prompts
        q, k, v = new(total, hq, d), new(total, hk, d), new(total, hk, d)
        o = ctx.attention_forward(q, k, v, cu, causal=True, dtype=args.dtype)
        print("prefill: %d sequences, %d tokens, out %s" % (b, total, o.shape))
        # a paged cache with room for the decode steps; page table rows in a shuffled pool
        max_pages = (int(lens.max()) + args.steps + page - 1) // page
        pages = rng.permutation(b * max_pages).astype(np.int32).reshape(b, max_pages)
        cache_dtype = np.uint16 if args.dtype == "bf16" else np.float32
        k_cache = np.zeros((b * max_pages, page, hk, d), cache_dtype)
        v_cache = np.zeros_like(k_cache)
        pos = np.concatenate([np.arange(n) for n in lens])
        seq = np.repeat(np.arange(b), lens)
        slots = (pages[seq, pos // page] * page + pos % page).astype(np.int64)
        ctx.kv_cache_append(k, v, slots, k_cache, v_cache, dtype=args.dtype,
                            cache_dtype=args.dtype)
        keys = [[k[cu[s]:cu[s + 1]]] for s in range(b)]
        vals = [[v[cu[s]:cu[s + 1]]] for s in range(b)]
        seqlens = lens.astype(np.int32).copy()
        cu_q = np.arange(b + 1, dtype=np.int32)
        for step in range(args.steps):
            qd, kd, vd = new(b, hq, d), new(b, hk, d), new(b, hk, d)
            slots = (pages[np.arange(b), seqlens // page] * page + seqlens % page)
            ctx.kv_cache_append(kd, vd, slots.astype(np.int64), k_cache, v_cache,
                                dtype=args.dtype, cache_dtype=args.dtype)
            seqlens += 1
            od = ctx.paged_attention_forward(qd, k_cache, v_cache, cu_q, pages, seqlens,
                                             causal=True, max_seqlen_q=1, dtype=args.dtype)
            for s in range(b):
                keys[s].append(kd[s:s + 1])
                vals[s].append(vd[s:s + 1])
            print("decode step %d: cache lengths %s" % (step, seqlens.tolist()))
        # check the last step against contiguous attention on the same keys
        kc = np.concatenate([np.concatenate(x) for x in keys])
        vc = np.concatenate([np.concatenate(x) for x in vals])
        cu_k = ctx.cu_seqlens_from_lengths(seqlens)
        want = ctx.attention_forward(qd, kc, vc, cu_q, cu_k, causal=True, dtype=args.dtype)
        if args.dtype == "bf16":
            od, want = (((x.astype(np.uint32)) << 16).view(np.float32) for x in (od, want))
        err = np.abs(od - want).max()
        print("paged decode vs contiguous attention: max abs difference %.3g" % err)
        return 0 if err <= (2e-2 if args.dtype == "bf16" else 1e-5) else 1


if __name__ == "__main__":
    sys.exit(main())
