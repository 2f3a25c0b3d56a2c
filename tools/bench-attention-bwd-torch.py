#!/usr/bin/env python3
"""Side-by-side of clvarlen's attention forward + backward with PyTorch's varlen_attn.

Run clvarlen's benchmark first with CLVARLEN_BENCH_DUMP=<dir>:

    CLVARLEN_BENCH_DUMP=/tmp/bwd build/tools/clvarlen-test bench --op attention-bwd
    python3 tools/bench-attention-bwd-torch.py --dump /tmp/bwd

For every bf16 case in <dir>/bwd-index.txt this regenerates q, k, v and do (the
generator of tools/ops/attention.c; do is tensor 4), times varlen_attn's forward
plus autograd backward with CUDA events, and compares PyTorch's dq, dk, dv with
clvarlen's (<case>.dq/.dk/.dv). FLOPs: 3.5x the forward's 4 sum(L^2) D Hq (halved
when causal), as FlashAttention counts forward + backward.
"""
import argparse
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("fwdbench",
                                               os.path.join(HERE, "bench-attention-torch.py"))
fwdbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fwdbench)


def rel_l2(a, b):
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", required=True, help="the CLVARLEN_BENCH_DUMP directory")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=1e-2,
                    help="relative L2 between the two runs' gradients (SPEC bf16 tolerance)")
    args = ap.parse_args()
    from torch.nn.attention.varlen import varlen_attn

    dev = torch.device("cuda")
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print(f"{'case':22} {'torch TFLOP/s':>14} {'clvarlen':>9} {'ratio':>6} "
          f"{'dq rel':>8} {'dk rel':>8} {'dv rel':>8}")
    failed = 0
    with open(os.path.join(args.dump, "bwd-index.txt")) as f:
        rows = [line.split() for line in f if line.strip()]
    for row in rows:
        name = row[0]
        n, total, hq, hk, d, causal, seed = (int(x) for x in row[1:8])
        cl_tflops = float(row[10])
        cu_host = fwdbench.read_raw(os.path.join(args.dump, name + ".cu"), torch.int32)
        lens = cu_host[1:] - cu_host[:-1]
        max_len = int(lens.max())
        flops = 3.5 * 4.0 * float((lens.double() ** 2).sum()) * d * hq * (0.5 if causal else 1.0)
        cu = cu_host.to(dev)
        q = fwdbench.make_tensor(1, (total, hq, d), seed, dev).requires_grad_()
        k = fwdbench.make_tensor(2, (total, hk, d), seed, dev).requires_grad_()
        v = fwdbench.make_tensor(3, (total, hk, d), seed, dev).requires_grad_()
        dout = fwdbench.make_tensor(4, (total, hq, d), seed, dev)

        def step():
            q.grad = k.grad = v.grad = None
            out = fwdbench.call_varlen(varlen_attn, q, k, v, cu, max_len, causal, hq, hk)
            if isinstance(out, tuple):
                out = out[0]
            out.backward(dout)

        step()
        grads = [q.grad.clone(), k.grad.clone(), v.grad.clone()]
        t = fwdbench.time_cuda(step, args.iters)
        torch_tflops = flops / t * 1e-12
        errs = []
        for ext, ref, shape in (("dq", grads[0], (total, hq, d)), ("dk", grads[1], (total, hk, d)),
                                ("dv", grads[2], (total, hk, d))):
            ours = fwdbench.read_raw(os.path.join(args.dump, f"{name}.{ext}"), torch.int16).view(
                torch.bfloat16).to(dev).view(*shape)
            errs.append(rel_l2(ours, ref))
            if not bool(torch.isfinite(ours.float()).all()):
                errs[-1] = float("inf")
        ok = all(e <= args.tolerance for e in errs)
        failed += 0 if ok else 1
        print(f"{name:22} {torch_tflops:14.1f} {cl_tflops:9.1f} {cl_tflops / torch_tflops:5.2f}x "
              f"{errs[0]:8.2e} {errs[1]:8.2e} {errs[2]:8.2e}{'' if ok else ' MISMATCH'}")
        sys.stdout.flush()
        del q, k, v, dout, grads
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
