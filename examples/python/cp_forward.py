#!/usr/bin/env python3
"""Per-document context-parallel attention forward (the CP sharding seed) in one process.

Every document of a packed batch is cut into 2W chunks; rank r holds chunks r and
2W-1-r (head and tail: causal work balances). Each rank attends with its shard of Q to
the whole documents' K/V (what an all-gather over the CP group gives it), with each local
query's position in its document (q_pos) so that the causal mask is the global one. The
ranks' outputs, scattered back to global order, equal unsharded attention.

    python3 cp_forward.py [--device cpu|pocl|NAME|INDEX] [--world W]
"""
import argparse
import sys

import numpy as np

import clvarlen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--world", type=int, default=4)
    args = ap.parse_args()
    hq, hk, d = 8, 2, 64
    rng = np.random.default_rng(1)
    with clvarlen.Context(device=args.device) as ctx:
        print("device:", ctx.device.name)
        lens = clvarlen.gen_seq_lens(seed=3, world=1, n=5, total=400)[0]
        cu = ctx.cu_seqlens_from_lengths(lens)
        total = int(cu[-1])
        q = rng.standard_normal((total, hq, d)).astype(np.float32)
        k = rng.standard_normal((total, hk, d)).astype(np.float32)
        v = rng.standard_normal((total, hk, d)).astype(np.float32)
        o_global = np.zeros_like(q)
        for rank in range(args.world):
            plan = ctx.cp_plan(cu, args.world, rank)
            q_local = ctx.cp_gather(q, cu, args.world, rank)
            o_local = ctx.attention_forward(q_local, k, v, plan.local_cu_seqlens, cu,
                                            causal=True, q_pos=plan.position)
            ctx.cp_scatter(o_local, cu, args.world, rank, o_global, accumulate=True)
            print("rank %d: %d local tokens (longest head %d, tail %d)"
                  % (rank, plan.local_tokens, plan.max_head, plan.max_tail))
        want = ctx.attention_forward(q, k, v, cu, causal=True)
        err = np.abs(o_global - want).max()
        print("CP over %d ranks vs unsharded attention: max abs difference %.3g"
              % (args.world, err))
        return 0 if err <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
