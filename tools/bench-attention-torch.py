#!/usr/bin/env python3
"""Side-by-side of clvarlen's varlen attention with PyTorch's varlen_attn.

Run clvarlen's benchmark first with CLVARLEN_BENCH_DUMP=<dir>:

    CLVARLEN_BENCH_DUMP=/tmp/attn build/tools/clvarlen-test bench --op attention
    python3 tools/bench-attention-torch.py --dump /tmp/attn

For every bf16 case in <dir>/index.txt this script regenerates the same q, k
and v (the generator documented in tools/ops/attention.c, reproduced here bit for
bit), reads the batch's cu_seqlens (from clvarlen_gen_seq_lens), times
torch.nn.attention.varlen.varlen_attn (FlashAttention's varlen kernel) with
CUDA events, compares its output with clvarlen's (<case>.o) and prints both
rates and their ratio. FLOPs are counted as in tools/ops/attention.c:
4 * sum(L^2) * D * Hq, halved for causal.

With --fa4 (flash-attn-4 installed, ../shared/gpu/README.md "Running the
Python anchors") FlashAttention-4's varlen forward (its Hopper kernel, the FA3
class) runs on the same inputs too: a column of its rate, its distance from
PyTorch's output, and each clvarlen run's ratio to it.
"""
import argparse
import inspect
import os
import sys

import torch

MASK32 = 0xFFFFFFFF


def bench_values(tensor_id, n, seed, device):
    """Element i of tensor `tensor_id`: the hash of tools/ops/attention.c, in int64 lanes."""
    s = (seed * 0x9E3779B9) & MASK32
    x = torch.arange(n, dtype=torch.int64, device=device)
    x = ((x * 4 + tensor_id) & MASK32) ^ s
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32  # wraps in int64; the low 32 bits are exact
    x = x ^ (x >> 16)
    u = (x >> 8).to(torch.float32) * (2.0 ** -24)
    return 2.0 * u - 1.0


def make_tensor(tensor_id, shape, seed, device):
    n = 1
    for d in shape:
        n *= d
    return bench_values(tensor_id, n, seed, device).to(torch.bfloat16).view(*shape)


def read_raw(path, dtype):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    return torch.frombuffer(data, dtype=dtype).clone()


def call_varlen(fn, q, k, v, cu, max_len, causal, hq, hk):
    params = inspect.signature(fn).parameters
    kwargs = {}
    if "window_size" in params:
        kwargs["window_size"] = (-1, 0) if causal else (-1, -1)
    elif "is_causal" in params:
        kwargs["is_causal"] = causal
    elif causal:
        raise RuntimeError("varlen_attn takes neither window_size nor is_causal")
    if hq != hk and "enable_gqa" in params:
        kwargs["enable_gqa"] = True
    return fn(q, k, v, cu, cu, max_len, max_len, **kwargs)


def call_fa4(fn, q, k, v, cu, max_len, causal):
    params = inspect.signature(fn).parameters
    kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, causal=causal)
    if "max_seqlen_q" in params:
        kw["max_seqlen_q"] = max_len
    if "max_seqlen_k" in params:
        kw["max_seqlen_k"] = max_len
    out = fn(q, k, v, **kw)
    return out[0] if isinstance(out, tuple) else out


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", required=True, nargs="+",
                    help="CLVARLEN_BENCH_DUMP directories (several: one column each)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--fa4", action="store_true",
                    help="FlashAttention-4's varlen forward beside PyTorch's")
    ap.add_argument("--tolerance", type=float, default=1e-2,
                    help="relative L2 between the two outputs (SPEC bf16 tolerance)")
    args = ap.parse_args()

    from torch.nn.attention.varlen import varlen_attn
    fa4 = None
    if args.fa4:
        from flash_attn.cute.interface import flash_attn_varlen_func as fa4

    dev = torch.device("cuda")
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    runs = []  # per dump directory: {case: its index.txt row}
    order = []
    for d in args.dump:
        cases = {}
        with open(os.path.join(d, "index.txt")) as f:
            for line in f:
                row = line.split()
                if not row:
                    continue
                cases[row[0]] = row
                if row[0] not in order:
                    order.append(row[0])
        runs.append(cases)
    failed = 0
    head = f"{'case':22} {'torch TFLOP/s':>14}"
    if fa4:
        head += f" {'FA4 TFLOP/s':>12} {'FA4/torch':>9} {'FA4 L2':>9}"
    for i in range(len(runs)):
        head += f" | {'run ' + str(i) + ' TFLOP/s':>15} {'ratio':>6} {'rel L2':>9}"
        if fa4:
            head += f" {'/ FA4':>6}"
    print(head)
    for name in order:
        first = next(i for i, r in enumerate(runs) if name in r)
        row = runs[first][name]
        n, total, hq, hk, d, causal, seed = (int(x) for x in row[1:8])
        cu_host = read_raw(os.path.join(args.dump[first], name + ".cu"), torch.int32)
        assert cu_host.numel() == n + 1 and int(cu_host[-1]) == total, name
        lens = cu_host[1:] - cu_host[:-1]
        max_len = int(lens.max())
        pairs = float((lens.double() ** 2).sum())
        flops = 4.0 * pairs * d * hq * (0.5 if causal else 1.0)
        cu = cu_host.to(dev)
        q = make_tensor(1, (total, hq, d), seed, dev)
        k = make_tensor(2, (total, hk, d), seed, dev)
        v = make_tensor(3, (total, hk, d), seed, dev)
        note = ""
        try:
            out = call_varlen(varlen_attn, q, k, v, cu, max_len, causal, hq, hk)
            kk, vv = k, v
        except Exception as e:  # a build without GQA: expand the kv heads
            note = f"kv heads expanded ({type(e).__name__})"
            kk = k.repeat_interleave(hq // hk, dim=1)
            vv = v.repeat_interleave(hq // hk, dim=1)
            out = call_varlen(varlen_attn, q, kk, vv, cu, max_len, causal, hq, hq)
        if isinstance(out, tuple):
            out = out[0]
        t = time_cuda(lambda: call_varlen(varlen_attn, q, kk, vv, cu, max_len, causal, hq,
                                          kk.shape[1]), args.iters)
        torch_tflops = flops / t * 1e-12
        ref = out.float()
        line = f"{name:22} {torch_tflops:14.1f}"
        fa4_tflops = None
        if fa4:
            try:
                o4 = call_fa4(fa4, q, k, v, cu, max_len, causal)
                t4 = time_cuda(lambda: call_fa4(fa4, q, k, v, cu, max_len, causal), args.iters)
                fa4_tflops = flops / t4 * 1e-12
                e4 = float((o4.float() - ref).norm() / ref.norm().clamp_min(1e-30))
                line += f" {fa4_tflops:12.1f} {fa4_tflops / torch_tflops:8.2f}x {e4:9.2e}"
                del o4
            except Exception as e:  # one shape FA4 refuses must not hide the rest
                line += f" {'failed':>12} {type(e).__name__:>9} {'':>9}"
        for i, r in enumerate(runs):
            if name not in r:
                line += f" | {'-':>15} {'-':>6} {'-':>9}"
                continue
            cl_tflops = float(r[name][9])
            ours = read_raw(os.path.join(args.dump[i], name + ".o"), torch.int16).view(
                torch.bfloat16).to(dev).view(total, hq, d)
            err = float((ours.float() - ref).norm() / ref.norm().clamp_min(1e-30))
            ok = err <= args.tolerance and bool(torch.isfinite(ours.float()).all())
            failed += 0 if ok else 1
            line += (f" | {cl_tflops:15.1f} {cl_tflops / torch_tflops:5.2f}x "
                     f"{err:9.2e}{'' if ok else ' MISMATCH'}")
            if fa4:
                line += (f" {cl_tflops / fa4_tflops:5.2f}x" if fa4_tflops else f" {'-':>6}")
            del ours
        print(line + (" " + note if note else ""))
        sys.stdout.flush()
        del q, k, v, kk, vv, out, ref
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
