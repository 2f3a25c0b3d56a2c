"""The gated delta rule against the float64 reference, through numpy arrays."""
import numpy as np
import pytest

import ref
from conftest import batch, rand


def inputs(seed, dtype, h=2, hv=4, kd=32, vd=16, n=4, total=140):
    rng = np.random.default_rng(seed)
    _, cu = batch(seed, n, total)
    t = int(cu[-1])
    return dict(q=rand(rng, (t, h, kd), dtype), k=rand(rng, (t, h, kd), dtype),
                v=rand(rng, (t, hv, vd), dtype), a=rand(rng, (t, hv), dtype),
                b=rand(rng, (t, hv), dtype),
                A_log=rng.standard_normal(hv).astype(np.float32) * 0.5,
                dt_bias=rng.standard_normal(hv).astype(np.float32)), cu, rng


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("algorithm", ["recurrent", "chunked"])
def test_pool_in_place(ctx, dtype, algorithm):
    x, cu, rng = inputs(11, dtype)
    n = len(cu) - 1
    hv, vd, kd = x["v"].shape[1], x["v"].shape[2], x["q"].shape[2]
    pool = (rng.standard_normal((n + 2, hv, vd, kd)) * 0.1).astype(np.float32)
    idx = np.arange(n, dtype=np.int32)[::-1].copy()
    idx[1] = -1
    before = pool.copy()
    o = ctx.gated_delta_rule(**x, cu_seqlens=cu, state_pool=pool, state_indices=idx,
                             use_qk_l2norm=True, algorithm=algorithm, dtype=dtype)
    f = {k: ref.as_f64(v, dtype) if k in "qkvab" else v.astype(np.float64)
         for k, v in x.items()}
    ro, rpool = ref.gdn(f["q"], f["k"], f["v"], f["a"], f["b"], f["A_log"], f["dt_bias"], cu,
                        before.astype(np.float64), idx, l2norm=True)
    tol = ref.TOL[dtype] if dtype != "f32" else 1e-4
    assert ref.rel_err(ref.as_f64(o, dtype), ro) <= tol
    assert ref.rel_err(pool, rpool) <= tol
    assert np.array_equal(pool[n:], before[n:])  # slots no sequence names


def test_fixed_seqlen_and_kv_layout(ctx):
    x, _, rng = inputs(12, "f32", total=60, n=2)
    t = 60
    x = {k: (v[:t] if v.ndim > 1 else v) for k, v in x.items()}
    hv, vd, kd = x["v"].shape[1], x["v"].shape[2], x["q"].shape[2]
    pool = (rng.standard_normal((3, hv, kd, vd)) * 0.1).astype(np.float32)
    before = pool.copy()
    o = ctx.gated_delta_rule(**x, fixed_seqlen=20, state_pool=pool, state_layout="kv")
    cu = np.arange(0, 61, 20, dtype=np.int32)
    f = {k: v.astype(np.float64) for k, v in x.items()}
    ro, rpool = ref.gdn(f["q"], f["k"], f["v"], f["a"], f["b"], f["A_log"], f["dt_bias"], cu,
                        before.astype(np.float64), None, layout="kv")
    assert ref.rel_err(o, ro) <= 1e-4 and ref.rel_err(pool, rpool) <= 1e-4


def test_fused_projection_views(ctx):
    """q, k, v, a, b as column views of one projection row (strides)."""
    rng = np.random.default_rng(13)
    _, cu = batch(13, 3, 50)
    t, h, hv, kd, vd = int(cu[-1]), 1, 2, 16, 16
    width = 2 * h * kd + hv * vd + 2 * hv
    proj = rng.standard_normal((t, width)).astype(np.float32)
    q = proj[:, :kd].reshape(t, h, kd)
    k = proj[:, kd:2 * kd].reshape(t, h, kd)
    v = proj[:, 2 * kd:2 * kd + hv * vd].reshape(t, hv, vd)
    a = proj[:, width - 2 * hv:width - hv]
    b = proj[:, width - hv:]
    A_log = np.zeros(hv, np.float32)
    dt_bias = np.zeros(hv, np.float32)
    o = ctx.gated_delta_rule(q, k, v, a, b, A_log, dt_bias, cu)
    f = lambda x: np.asarray(x, np.float64)  # noqa: E731
    ro, _ = ref.gdn(f(q), f(k), f(v), f(a), f(b), f(A_log), f(dt_bias), cu)
    assert ref.rel_err(o, ro) <= 1e-4
