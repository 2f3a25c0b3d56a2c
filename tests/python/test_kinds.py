"""Every op through each kind of array: numpy (the baseline), torch CPU tensors through
DLPack (bf16 activations), and PyOpenCL arrays on the cl_mem path (pocl run). The same
context gives the same bits whatever the arrays are."""
import numpy as np
import pytest

import clvarlen
from conftest import batch, require
from ref import f32_to_bf16


def data():
    rng = np.random.default_rng(41)
    lens, cu = batch(41, 4, 70)
    t = int(cu[-1])
    bf = lambda *s: f32_to_bf16(rng.standard_normal(s))  # noqa: E731
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    x = dict(lens=lens, cu=cu, q=bf(t, 4, 32), k=bf(t, 2, 32), v=bf(t, 2, 32), do=bf(t, 4, 32),
             o_parts=bf(2, t, 4, 32), lse_parts=f32(2, 4, t), la=f32(4, t), lb=f32(4, t),
             padded=f32(3, 6, 5), valid=np.array([2, 6, 0], np.int32),
             mask=(rng.random((3, 6)) < 0.5).astype(np.uint8),
             src=f32(9, 3), idx=np.array([4, -1, 0, 8], np.int32), dst=f32(9, 3),
             kv_len=np.array([4, 9, 2], np.int32), q_len=np.array([1, 3, 2], np.int32),
             table=np.arange(12, dtype=np.int32).reshape(3, 4),
             offsets=np.array([5, 0, 1, 2, 7, 3][:len(lens)], np.int32),
             gq=bf(t, 2, 16), gk=bf(t, 2, 16), gv=bf(t, 4, 16), ga=bf(t, 4), gb=bf(t, 4),
             A_log=f32(4) * 0.3, dt_bias=f32(4), pool=f32(len(lens) + 1, 4, 16, 16) * 0.1,
             sidx=np.arange(len(lens), dtype=np.int32))
    x["o"] = x["q"].copy()
    x["lse"] = f32(4, t)
    x["slots"] = rng.permutation(40)[:t % 40].astype(np.int64)
    x["kc"], x["vc"] = np.zeros((10, 4, 2, 32), np.uint16), np.zeros((10, 4, 2, 32), np.uint16)
    x["pages"] = rng.permutation(10)[:8].astype(np.int32).reshape(4, 2)
    x["cache_lens"] = np.array([3, 8, 1, 5], np.int32)
    x["cu_dec"] = np.arange(5, dtype=np.int32)
    x["qd"] = x["q"][:4].copy()
    x["packed"], x["src_index"] = x["padded"][0, :4].copy(), np.array([0, 7, 9, 17], np.int64)
    return x


BF = dict(dtype="bf16")
OPS = {
    "attention_forward": lambda c, X: c.attention_forward(
        X("q"), X("k"), X("v"), X("cu"), causal=True, return_lse=True, **BF),
    "attention_backward": lambda c, X: c.attention_backward(
        X("do"), X("q"), X("k"), X("v"), X("o"), X("lse"), X("cu"), causal=True, **BF),
    "attention_merge": lambda c, X: c.attention_merge(X("o_parts"), X("lse_parts"),
                                                      return_lse=True, **BF),
    "attention_merge2": lambda c, X: c.attention_merge2(X("q"), X("la"), X("o"), X("lb"), **BF),
    "kv_cache_append": lambda c, X: _inplace(
        lambda kc, vc: c.kv_cache_append(X("k")[:len(X("slots"))], X("v")[:len(X("slots"))],
                                         X("slots"), kc, vc, **BF, cache_dtype="bf16"),
        X("kc"), X("vc")),
    "paged_attention_forward": lambda c, X: c.paged_attention_forward(
        X("qd"), X("kc"), X("vc"), X("cu_dec"), X("pages"), X("cache_lens"), causal=True,
        return_lse=True, **BF),
    "pack": lambda c, X: c.pack(X("padded"), X("valid")),
    "pack_masked": lambda c, X: c.pack_masked(X("padded"), X("mask")),
    "unpack": lambda c, X: c.unpack(X("packed"), X("src_index"), 3, 6),
    "gather_rows": lambda c, X: c.gather_rows(X("src"), X("idx")),
    "scatter_rows": lambda c, X: c.scatter_rows(X("src")[:4], X("idx"), X("dst"),
                                                accumulate=True),
    "cp_plan": lambda c, X: tuple(c.cp_plan(X("cu"), 2, 1)),
    "cp_gather": lambda c, X: c.cp_gather(X("q"), X("cu"), 3, 2, **BF),
    "cp_scatter": lambda c, X: c.cp_scatter(X("q")[:int(c.cp_plan(X("cu"), 3, 0).local_tokens)],
                                            X("cu"), 3, 0, **BF),
    "seqlens_expand": lambda c, X: c.seqlens_expand(X("kv_len"), X("q_len"),
                                                    page_table=X("table")),
    "token_maps": lambda c, X: c.token_maps(X("cu"), X("offsets")),
    "cu_seqlens_from_lengths": lambda c, X: c.cu_seqlens_from_lengths(X("lens")),
    "lengths_from_cu_seqlens": lambda c, X: c.lengths_from_cu_seqlens(X("cu")),
    "gated_delta_rule": lambda c, X: _inplace(
        lambda pool: c.gated_delta_rule(X("gq"), X("gk"), X("gv"), X("ga"), X("gb"),
                                        X("A_log"), X("dt_bias"), X("cu"), state_pool=pool,
                                        state_indices=X("sidx"), use_qk_l2norm=True, **BF),
        X("pool")),
}


def _inplace(fn, *bufs):
    out = fn(*bufs)
    return (out,) + bufs if out is not None else bufs


def flat(result):
    items = result if isinstance(result, tuple) else (result,)
    return [x for x in items if x is not None]


def to_numpy(x, torch=None):
    if isinstance(x, (int, np.integer)):
        return np.array(x)
    if hasattr(x, "get") and hasattr(x, "base_data"):
        return x.get()
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(np.uint16)
        return x.numpy()
    return np.asarray(x)


def baseline(ctx, name):
    x = data()
    return [to_numpy(r) for r in flat(OPS[name](ctx, lambda k: x[k]))]


def test_every_public_op_is_covered():
    lib_ops = {n[len("clvarlen_"):] for n in dir(clvarlen._clvarlen.lib)  # noqa: SLF001
               if n.startswith("clvarlen_") and not n.startswith("clvarlen_cl_")}
    ops = {n[len("clvarlen_cl_"):] for n in dir(clvarlen._clvarlen.lib)
           if n.startswith("clvarlen_cl_") and "scratch" not in n}
    assert ops <= set(OPS) | {"gen_seq_lens", "pack", "cp_plan"}, ops - set(OPS)
    for op in ops:
        assert hasattr(clvarlen.Context, op)
    assert "attention_forward" in lib_ops


@pytest.mark.parametrize("name", sorted(OPS))
def test_torch(ctx, name):
    torch = require("torch")
    x = data()

    def conv(k):
        a = x[k]
        if a.dtype == np.uint16:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    got = [to_numpy(r, torch) for r in flat(OPS[name](ctx, conv))]
    want = baseline(ctx, name)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.array_equal(g, w), name


@pytest.mark.parametrize("name", sorted(OPS))
def test_pyopencl(clctx, clqueue, name):
    import pyopencl.array as cla  # pylint: disable=import-outside-toplevel
    x = data()
    got = [to_numpy(r) for r in flat(OPS[name](clctx, lambda k: cla.to_device(clqueue, x[k])))]
    want = baseline(clctx, name)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.array_equal(g, w), name


def test_pyopencl_gen_seq_lens(clctx, clqueue):
    import pyopencl.array as cla  # pylint: disable=import-outside-toplevel
    out = cla.empty(clqueue, (2, 5), np.int32)
    assert clctx.gen_seq_lens(9, 2, 5, 77, out=out) is out
    assert np.array_equal(out.get(), clvarlen.gen_seq_lens(9, 2, 5, 77))
