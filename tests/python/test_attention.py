"""Attention ops against the float64 references, through numpy arrays."""
import numpy as np
import pytest

import ref
from conftest import batch, rand


def inputs(seed, dtype, hq=4, hk=2, d=64, n=5, total=150):
    rng = np.random.default_rng(seed)
    lens, cu = batch(seed, n, total)
    t = int(cu[-1])
    return (rand(rng, (t, hq, d), dtype), rand(rng, (t, hk, d), dtype),
            rand(rng, (t, hk, d), dtype), cu)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("causal,window,softcap", [(False, (-1, -1), 0.0),
                                                   (True, (-1, -1), 0.0),
                                                   (True, (16, 0), 0.0),
                                                   (False, (-1, -1), 30.0)])
def test_forward(ctx, dtype, causal, window, softcap):
    q, k, v, cu = inputs(1, dtype)
    o, lse = ctx.attention_forward(q, k, v, cu, causal=causal, window_size=window,
                                   softcap=softcap, return_lse=True, dtype=dtype)
    assert o.shape == q.shape and lse.shape == (q.shape[1], q.shape[0])
    ro, rl = ref.attention(ref.as_f64(q, dtype), ref.as_f64(k, dtype), ref.as_f64(v, dtype),
                           cu, cu, causal, window, softcap)
    assert ref.rel_err(ref.as_f64(o, dtype), ro) <= ref.TOL[dtype]
    assert ref.rel_err(lse, rl) <= 1e-5


def test_forward_strided_q_pos_and_out(ctx):
    """q, k, v as column views of one fused qkv projection; q_pos; out= reused."""
    rng = np.random.default_rng(2)
    lens, cu = batch(2, 4, 90)
    t = int(cu[-1])
    qkv = rng.standard_normal((t, 8, 64)).astype(np.float32)
    q, k, v = qkv[:, 0:4], qkv[:, 4:6], qkv[:, 6:8]
    # every query of a sequence sees the first positions it names
    q_pos = np.concatenate([np.arange(n) for n in lens]).astype(np.int32)
    out = np.full((t, 4, 64), 7.0, np.float32)
    res = ctx.attention_forward(q, k, v, cu, causal=True, q_pos=q_pos, out=out)
    assert res is out
    ro, _ = ref.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                          cu, cu, True, q_pos=q_pos)
    assert ref.rel_err(out, ro) <= 1e-5


def test_lq_ne_lk_and_scale(ctx):
    rng = np.random.default_rng(3)
    cu_q = np.array([0, 3, 3, 10], np.int32)
    cu_k = np.array([0, 8, 12, 30], np.int32)
    q = rng.standard_normal((10, 2, 32)).astype(np.float32)
    k = rng.standard_normal((30, 1, 32)).astype(np.float32)
    v = rng.standard_normal((30, 1, 48)).astype(np.float32)
    o = ctx.attention_forward(q, k, v, cu_q, cu_k, causal=True, softmax_scale=0.3)
    ro, _ = ref.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                          cu_q, cu_k, True, scale=0.3)
    assert ref.rel_err(o, ro) <= 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_backward(ctx, causal):
    q, k, v, cu = inputs(4, "f32", n=3, total=70)
    o, lse = ctx.attention_forward(q, k, v, cu, causal=causal, return_lse=True)
    do = np.random.default_rng(5).standard_normal(o.shape).astype(np.float32)
    dq, dk, dv = ctx.attention_backward(do, q, k, v, o, lse, cu, causal=causal)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    rq, rk, rv = ref.attention_backward(f(do), f(q), f(k), f(v), f(o), lse.astype(np.float64),
                                        cu, cu, causal)
    for got, want in ((dq, rq), (dk, rk), (dv, rv)):
        assert ref.rel_err(got, want) <= 1e-4
    # f32 gradients from bf16 inputs
    qb, kb, vb = (ref.f32_to_bf16(x) for x in (q, k, v))
    ob, lb = ctx.attention_forward(qb, kb, vb, cu, causal=causal, return_lse=True, dtype="bf16")
    grads = ctx.attention_backward(ref.f32_to_bf16(do), qb, kb, vb, ob, lb, cu, causal=causal,
                                   grad_f32=True, dtype="bf16")
    assert all(g.dtype == np.float32 for g in grads)


def test_merge(ctx):
    rng = np.random.default_rng(6)
    o_parts = rng.standard_normal((3, 20, 2, 32)).astype(np.float32)
    lse_parts = rng.standard_normal((3, 2, 20)).astype(np.float32)
    lse_parts[1, 0, :5] = -np.inf
    lse_parts[:, 1, 7] = -np.inf
    o, lse = ctx.attention_merge(o_parts, lse_parts, return_lse=True)
    ro, rl = ref.merge(o_parts.astype(np.float64), lse_parts.astype(np.float64))
    assert ref.rel_err(o, ro) <= 1e-5 and ref.rel_err(lse, rl) <= 1e-5
    # two-way, in place into the first part
    oa, la = o_parts[0].copy(), lse_parts[0].copy()
    res_o, res_l = ctx.attention_merge2(oa, la, o_parts[1], lse_parts[1], out=oa, lse=la)
    ro2, rl2 = ref.merge(o_parts[:2].astype(np.float64), lse_parts[:2].astype(np.float64))
    assert res_o is oa and res_l is la
    assert ref.rel_err(oa, ro2) <= 1e-5 and ref.rel_err(la, rl2) <= 1e-5


@pytest.mark.parametrize("page_size", [1, 16])
def test_paged_decode_after_append(ctx, page_size):
    """kv_cache_append then paged attention equals contiguous attention on the same rows."""
    rng = np.random.default_rng(7)
    hq, hk, d = 4, 2, 64
    ctx_lens = np.array([5, 1, 33, 17], np.int32)
    b = len(ctx_lens)
    max_pages = (int(ctx_lens.max()) + page_size - 1) // page_size
    num_pages = b * max_pages + 3
    perm = rng.permutation(num_pages).astype(np.int32)
    page_table = perm[:b * max_pages].reshape(b, max_pages)
    cu_k = np.zeros(b + 1, np.int32)
    cu_k[1:] = np.cumsum(ctx_lens)
    k = rng.standard_normal((int(cu_k[-1]), hk, d)).astype(np.float32)
    v = rng.standard_normal((int(cu_k[-1]), hk, d)).astype(np.float32)
    slots = np.concatenate([page_table[r, np.arange(n) // page_size] * page_size
                            + np.arange(n) % page_size for r, n in enumerate(ctx_lens)])
    k_cache = np.zeros((num_pages, page_size, hk, d), np.float32)
    v_cache = np.zeros_like(k_cache)
    ctx.kv_cache_append(k, v, slots.astype(np.int64), k_cache, v_cache)
    q = rng.standard_normal((b, hq, d)).astype(np.float32)
    cu_q = np.arange(b + 1, dtype=np.int32)
    o, lse = ctx.paged_attention_forward(q, k_cache, v_cache, cu_q, page_table, ctx_lens,
                                         causal=True, return_lse=True)
    ro, rl = ref.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                           cu_q, cu_k, True)
    assert ref.rel_err(o, ro) <= 1e-5 and ref.rel_err(lse, rl) <= 1e-5
    o1 = ctx.paged_attention_forward(q, k_cache, v_cache, cu_q, page_table, ctx_lens,
                                     causal=True, num_splits=3)
    assert ref.rel_err(o1, ro) <= 1e-5
