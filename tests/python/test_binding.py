"""The binding itself: errors, nothing written on error, DLPack, PyOpenCL, threads, layout."""
import os
import subprocess
import threading

import numpy as np
import pytest

import clvarlen
import ref
from clvarlen._clvarlen import ffi
from conftest import batch, require


def qkv(seed=31, t=40, d=32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((t, 4, d)).astype(np.float32),
            rng.standard_normal((t, 2, d)).astype(np.float32),
            rng.standard_normal((t, 2, d)).astype(np.float32))


def test_version_devices():
    assert clvarlen.version.count(".") == 2 and len(clvarlen.version_info) == 3
    devs = clvarlen.devices()
    assert devs[-1].index == -1 and devs[-1].kind == "cpu-fallback"
    assert clvarlen.select_device("cpu")[0] == -1


def test_layout():
    """Every struct's size and field offsets as the C compiler lays them out."""
    exe = os.environ.get("CLVARLEN_PY_LAYOUT")
    if not exe:
        pytest.skip("CLVARLEN_PY_LAYOUT not set (run through meson test)")
    lines = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split("\n")
    seen = 0
    for line in filter(None, lines):
        name, value = line.rsplit(" ", 1)
        if "." in name:
            struct, field = name.split(".")
            assert ffi.offsetof(struct, field) == int(value), name
        else:
            assert ffi.sizeof(name) == int(value), name
            seen += 1
    assert seen >= 8  # params, info, plan ... structs


def expect(exc, status, fn):
    with pytest.raises(exc) as e:
        fn()
    assert e.value.status == status and e.value.message
    return e.value


def test_errors_write_nothing(ctx):
    q, k, v = qkv()
    cu = np.array([0, 30, 20, 40], np.int32)  # decreasing
    out = np.full(q.shape, 3.0, np.float32)
    lse = np.full((4, 40), 5.0, np.float32)
    e = expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_CU_SEQLENS",
               lambda: ctx.attention_forward(q, k, v, cu, out=out, lse=lse))
    assert isinstance(e, ValueError) and isinstance(e, clvarlen.Error)
    assert (out == 3.0).all() and (lse == 5.0).all()
    good = np.array([0, 40], np.int32)
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: ctx.attention_forward(q, k.astype(np.float16), v, good, out=out))
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: ctx.attention_forward(q[:, :, ::2], k[:, :, ::2], v, good, out=out))
    ro = np.zeros(q.shape, np.float32)
    ro.setflags(write=False)
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: ctx.attention_forward(q, k, v, good, out=ro))
    q8, k8 = q[:, :, :8].copy(), k[:, :, :8].copy()
    expect(clvarlen.UnsupportedError, "CLVARLEN_ERROR_UNSUPPORTED",
           lambda: ctx.attention_forward(q8, k8, k8, good))
    assert (out == 3.0).all()
    src = np.arange(12, dtype=np.float32).reshape(6, 2)
    dst = np.full((2, 2), 9.0, np.float32)
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INDEX_OUT_OF_RANGE",
           lambda: ctx.gather_rows(src, np.array([1, 6], np.int32), out=dst))
    assert (dst == 9.0).all()
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: ctx.scatter_rows(src[:2], np.array([1, 1], np.int32), dst))
    assert (dst == 9.0).all()
    pool = np.ones((2, 4, 16, 32), np.float32)
    x = np.zeros((4, 2, 32), np.float32)
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INDEX_OUT_OF_RANGE",
           lambda: ctx.gated_delta_rule(x, x, np.zeros((4, 4, 16), np.float32),
                                        np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32),
                                        np.zeros(4, np.float32), np.zeros(4, np.float32),
                                        np.array([0, 4], np.int32), state_pool=pool,
                                        state_indices=np.array([2], np.int32)))
    assert (pool == 1.0).all()
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: ctx.gated_delta_rule(x, x, x, x[:, 0], x[:, 0], np.zeros(2, np.float32),
                                        np.zeros(2, np.float32), algorithm="fast",
                                        fixed_seqlen=4))


def test_device_errors():
    expect(clvarlen.DeviceError, "CLVARLEN_ERROR_DEVICE_NOT_FOUND",
           lambda: clvarlen.Context(device="no-such-device-anywhere"))
    c = clvarlen.Context(device="cpu")
    c.close()
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: c.cu_seqlens_from_lengths(np.array([1], np.int32)))


class FakeCuda:
    """A tensor of another runtime on a GPU (DLPack device type 2)."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be exported")


def test_device_tensor_refused(ctx):
    expect(clvarlen.UnsupportedError, "CLVARLEN_ERROR_UNSUPPORTED",
           lambda: ctx.gather_rows(FakeCuda(), np.array([0], np.int32)))


def test_torch_dlpack_bf16(ctx):
    torch = require("torch")
    q, k, v = qkv(32)
    cu = np.array([0, 7, 7, 8, 40], np.int32)
    tq, tk, tv = (torch.from_numpy(x).to(torch.bfloat16) for x in (q, k, v))
    o, lse = ctx.attention_forward(tq, tk, tv, torch.from_numpy(cu), causal=True,
                                   return_lse=True)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16
    f = lambda t: t.float().double().numpy()  # noqa: E731
    ro, rl = ref.attention(f(tq), f(tk), f(tv), cu, cu, True)
    assert ref.rel_err(f(o), ro) <= 1e-2 and ref.rel_err(lse.numpy(), rl) <= 1e-5
    # the same bits through numpy uint16 with dtype="bf16"
    u = lambda t: t.view(torch.int16).numpy().view(np.uint16)  # noqa: E731
    o2 = ctx.attention_forward(u(tq), u(tk), u(tv), cu, causal=True, dtype="bf16")
    assert np.array_equal(o2, u(o))
    # non-contiguous torch rows use the strides
    big = torch.zeros(40, 8, 32, dtype=torch.bfloat16)
    big[:, :4] = tq
    o3 = ctx.attention_forward(big[:, :4], tk, tv, torch.from_numpy(cu), causal=True)
    assert torch.equal(o3, o)


def test_threads_share_a_context(ctx):
    q, k, v = qkv(33, t=64)
    lens, cu = batch(33, 3, 63)
    want = ctx.attention_forward(q, k, v, cu, causal=True)
    results, errors = [], []

    def work():
        try:
            for _ in range(3):
                results.append(ctx.attention_forward(q, k, v, cu, causal=True))
        except Exception as e:  # pylint: disable=broad-except
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 12
    assert all(np.array_equal(r, want) for r in results)


def test_pyopencl_arrays(clctx, clqueue):
    import pyopencl.array as cla  # pylint: disable=import-outside-toplevel
    q, k, v = qkv(34)
    cu = np.array([0, 5, 5, 6, 40], np.int32)
    d = lambda x: cla.to_device(clqueue, x)  # noqa: E731
    o, lse = clctx.attention_forward(d(q), d(k), d(v), d(cu), causal=True, return_lse=True)
    assert isinstance(o, cla.Array)
    ro, rl = ref.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                           cu, cu, True)
    assert ref.rel_err(o.get(), ro) <= 1e-5 and ref.rel_err(lse.get(), rl) <= 1e-5
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: clctx.attention_forward(d(q), k, v, cu))
    other = clvarlen.Context(device="cpu")
    expect(clvarlen.UnsupportedError, "CLVARLEN_ERROR_NO_OPENCL",
           lambda: other.attention_forward(d(q), d(k), d(v), d(cu)))
    other.close()


def test_precompile_and_supports(ctx):
    ctx.precompile(ops=("segment",), dtypes=("f32",), head_dims=(64,))
    assert ctx.supports("attention", "f32", 64, 4, 2)
    assert not ctx.supports("attention", "f32", 8, 4, 2) and ctx.last_reason
    with pytest.raises(clvarlen.InvalidArgumentError):
        ctx.supports("no-such-op")


def test_gil_released_during_a_call():
    """Python threads run while a call works in C (cffi releases the GIL)."""
    c = clvarlen.Context(device="cpu", threads=1)
    rng = np.random.default_rng(35)
    q = rng.standard_normal((3000, 4, 64)).astype(np.float32)
    k = rng.standard_normal((3000, 1, 64)).astype(np.float32)
    cu = np.array([0, 3000], np.int32)
    span = []

    def work():
        import time  # pylint: disable=import-outside-toplevel
        t0 = time.monotonic()
        c.attention_forward(q, k, k, cu)
        span.extend([t0, time.monotonic()])

    import time  # pylint: disable=import-outside-toplevel
    th = threading.Thread(target=work)
    ticks = []
    th.start()
    while th.is_alive():
        ticks.append(time.monotonic())
    th.join()
    c.close()
    t0, t1 = span
    inside = [t for t in ticks if t0 + 0.2 * (t1 - t0) < t < t1 - 0.2 * (t1 - t0)]
    assert t1 - t0 > 0.02, "the call was too short to tell"
    assert len(inside) > 100


def test_empty_batches(ctx):
    """Zero tokens (numpy's empty arrays may carry zero strides) are valid no-ops."""
    cu = np.zeros(1, np.int32)
    q, k = np.zeros((0, 4, 64), np.float32), np.zeros((0, 2, 64), np.float32)
    assert ctx.attention_forward(q, k, k, cu).shape == (0, 4, 64)
    assert ctx.gather_rows(np.zeros((0, 4), np.float32), np.zeros(0, np.int32)).shape == (0, 4)
    packed, cu_out, src = ctx.pack(np.zeros((0, 3, 2), np.float32), np.zeros(0, np.int32))
    assert packed.shape == (0, 2) and cu_out.tolist() == [0] and src.shape == (0,)
    shapes = [(0, 1, 16), (0, 1, 16), (0, 2, 16), (0, 2), (0, 2), (2,), (2,)]
    o = ctx.gated_delta_rule(*(np.zeros(s, np.float32) for s in shapes), cu)
    assert o.shape == (0, 2, 16)
    assert ctx.cp_plan(cu, 2, 1).local_tokens == 0
    expect(clvarlen.InvalidArgumentError, "CLVARLEN_ERROR_INVALID_ARGUMENT",
           lambda: ctx.attention_forward(q, k, k, cu, dtype="bf16"))
