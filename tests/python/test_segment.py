"""Segment ops against numpy references (exact: bitwise copies)."""
import numpy as np
import pytest

import clvarlen
import ref
from conftest import batch


def test_gen_seq_lens(ctx):
    out = ctx.gen_seq_lens(42, 3, 7, 1000)
    assert out.shape == (3, 7) and out.dtype == np.int32
    assert (out.sum(1) == 1000).all() and (out >= 0).all()
    assert np.array_equal(out, clvarlen.gen_seq_lens(42, 3, 7, 1000))
    assert not np.array_equal(out, clvarlen.gen_seq_lens(43, 3, 7, 1000))


def test_cu_lengths_maps(ctx):
    lens, cu = batch(21, 6, 80)
    assert np.array_equal(ctx.cu_seqlens_from_lengths(lens), cu)
    assert np.array_equal(ctx.lengths_from_cu_seqlens(cu), lens)
    offsets = np.arange(len(lens), dtype=np.int32) * 100
    seq_id, pos = ctx.token_maps(cu, offsets)
    want_id = np.repeat(np.arange(len(lens)), lens)
    want_pos = np.concatenate([np.arange(n) + 100 * s for s, n in enumerate(lens)])
    assert np.array_equal(seq_id, want_id) and np.array_equal(pos, want_pos)
    sid_only, none = ctx.token_maps(cu, pos=False)
    assert none is None and np.array_equal(sid_only, want_id)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int16])
def test_pack_unpack(ctx, dtype):
    rng = np.random.default_rng(22)
    b, s = 5, 9
    valid = np.array([3, 0, 9, 1, 5], np.int32)
    padded = (rng.standard_normal((b, s, 2, 3)) * 100).astype(dtype)
    packed, cu, src = ctx.pack(padded, valid)
    want = np.concatenate([padded[i, :n] for i, n in enumerate(valid)])
    assert np.array_equal(packed, want)
    assert np.array_equal(cu, np.concatenate([[0], np.cumsum(valid)]))
    assert np.array_equal(src, np.concatenate([i * s + np.arange(n) for i, n in enumerate(valid)]))
    back = ctx.unpack(packed, src, b, s)
    mask = np.arange(s)[None, :] < valid[:, None]
    assert np.array_equal(back[mask], padded[mask]) and not back[~mask].any()
    mask2 = rng.random((b, s)) < 0.4
    p2, cu2, src2 = ctx.pack_masked(padded, mask2)
    assert np.array_equal(p2, padded[mask2]) and np.array_equal(src2, np.flatnonzero(mask2))
    assert np.array_equal(np.diff(cu2), mask2.sum(1))


def test_unpack_pad_value_bf16(ctx):
    packed = ref.f32_to_bf16(np.arange(6, dtype=np.float32).reshape(3, 2))
    out = ctx.unpack(packed, np.array([0, 3, 4], np.int64), 2, 3, pad_value=-1.5, dtype="bf16")
    vals = ref.bf16_to_f32(out)
    assert vals[0, 0].tolist() == [0, 1] and vals[1, 0].tolist() == [2, 3]
    assert (vals[0, 1:] == -1.5).all() and (vals[1, 2] == -1.5).all()


def test_gather_scatter(ctx):
    rng = np.random.default_rng(23)
    src = rng.standard_normal((10, 4)).astype(np.float32)
    idx = np.array([3, -1, 9, 0, 3], np.int32)
    g = ctx.gather_rows(src, idx)
    want = np.where((idx >= 0)[:, None], src[idx], 0)
    assert np.array_equal(g, want)
    dst = np.ones((10, 4), np.float32)
    ctx.scatter_rows(src[:3], np.array([2, -1, 7], np.int32), dst, zero_rest=True)
    want = np.zeros((10, 4), np.float32)
    want[2], want[7] = src[0], src[2]
    assert np.array_equal(dst, want)
    acc = np.zeros((4, 4), np.float32)
    ctx.scatter_rows(src[:5], np.array([1, 1, 3, -1, 1], np.int32), acc, accumulate=True)
    assert np.allclose(acc[1], src[0] + src[1] + src[4]) and np.array_equal(acc[3], src[2])


def test_seqlens_expand(ctx):
    kv = np.array([5, 2, 9], np.int32)
    ql = np.array([2, 3, 1], np.int32)
    pt = np.arange(12, dtype=np.int32).reshape(3, 4)
    se, pto = ctx.seqlens_expand(kv, ql, page_table=pt, col_limit=3)
    assert se.tolist() == [4, 5, 0, 1, 2, 9]
    assert np.array_equal(pto, np.repeat(pt[:, :3], ql, axis=0))
    se2, none = ctx.seqlens_expand(kv, uniform_q_len=2)
    assert none is None and se2.tolist() == [4, 5, 1, 2, 8, 9]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_cp(ctx, world):
    lens, cu = batch(24, 5, 101, extra=(0, 1, 3))
    rows = np.random.default_rng(25).standard_normal((int(cu[-1]), 3)).astype(np.float32)
    total = np.zeros_like(rows)
    for rank in range(world):
        plan = ctx.cp_plan(cu, world, rank)
        want = ref.cp_local_index(cu, world, rank)
        assert np.array_equal(plan.global_index, want) and plan.local_tokens == len(want)
        assert plan.local_cu_seqlens[-1] == len(want)
        local = ctx.cp_gather(rows, cu, world, rank)
        assert np.array_equal(local, rows[want])
        total = ctx.cp_scatter(local, cu, world, rank, total, accumulate=True)
        alone = ctx.cp_scatter(local, cu, world, rank)
        assert np.array_equal(alone[want], rows[want])
        assert not np.delete(alone, want, axis=0).any()
    assert np.array_equal(total, rows)
