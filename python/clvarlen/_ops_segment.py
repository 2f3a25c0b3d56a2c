"""Segment scatter/gather (SPEC 2): pack/unpack, rows, CP sharding, maps, expansion."""
import collections

import numpy as np

from typing import Optional, Tuple, Union

from . import _arrays as A
from ._arrays import Array
from ._clvarlen import ffi, lib
from ._context import _Buf
from ._errors import invalid

_DT = {k: v[0] for k, v in A.DTYPES.items()}
_ACCUM = ("f32", "f16", "bf16", "i32")

CpPlan = collections.namedtuple(
    "CpPlan", "local_cu_seqlens head_cu tail_cu global_index position local_tokens max_head "
              "max_tail")
CpPlan.__doc__ = """A per-document CP shard plan (SPEC 2.5) for one rank.

local_cu_seqlens, head_cu, tail_cu: int32 [N + 1]; global_index, position: int32
[local_tokens]; local_tokens, max_head, max_tail: ints."""


def _ints(name, obj, dtype="i32", ndim=1):
    v = A.view(name, obj)
    A.need_dtype(v, (dtype,))
    if v.ndim != ndim:
        raise invalid("%s: a %d-d %s array, got shape %s" % (name, ndim, dtype, list(v.shape)))
    A.need_contiguous(v)
    return v


def _rows(name, obj, dtype, first_dims=1):
    """A [rows..., *row] view: (view, row_elems, clvarlen dtype name, row stride)."""
    v = A.view(name, obj, dtype)
    if v.ndim < first_dims:
        raise invalid("%s: at least %d dimensions expected" % (name, first_dims))
    row = 1
    for s in v.shape[first_dims:]:
        row *= s
    A.need_inner_contiguous(v, first_dims)
    return v, row


def _row_dtype(v, row, accumulate=False):
    """The C dtype and row length: unknown element types travel as bytes (bitwise copies)."""
    if v.dtype in _DT:
        return _DT[v.dtype], row
    if accumulate:
        raise invalid("%s: accumulate needs f32, f16, bf16 or i32 rows (got %s; say "
                      "dtype='bf16' for uint16 bf16 data)" % (v.name, v.dtype))
    return lib.CLVARLEN_DTYPE_U8, row * v.itemsize


def _stride(v, relems, dim=0):
    """The element stride (bytes for raw rows) of dimension dim, checked against a row."""
    scale = 1 if v.dtype in _DT else v.itemsize
    if v.ndim <= dim or v.shape[dim] <= 1 or v.numel() == 0:
        return relems
    stride = v.strides[dim] * scale
    if stride < relems:
        raise invalid("%s: a row stride of %d elements, less than a row (%d): rows must not "
                      "overlap or run backwards" % (v.name, stride // scale, relems // scale))
    return stride


def _padded_stride(v, relems):
    """The row stride of padded [batch, max_seqlen, *row]; batches must be max_seqlen rows apart."""
    b, s = v.shape[0], v.shape[1]
    scale = 1 if v.dtype in _DT else v.itemsize
    if v.numel() == 0:
        return relems
    if s > 1:
        stride = _stride(v, relems, 1)
        if b > 1 and v.strides[0] * scale != s * stride:
            raise invalid("%s: batches must be max_seqlen rows apart (strides %s)"
                          % (v.name, list(v.strides)))
        return stride
    return _stride(v, relems, 0)


def _same_row(a, b, ra, rb):
    if ra != rb or (a.dtype != b.dtype and a.dtype in _DT and b.dtype in _DT):
        raise invalid("%s and %s: rows of %d %s and %d %s elements differ"
                      % (a.name, b.name, ra, a.dtype, rb, b.dtype))


class SegmentOps:
    """Segment methods of :class:`clvarlen.Context`."""

    def cu_seqlens_from_lengths(self, lengths: Array, *, out: Optional[Array] = None) -> Array:
        """cu_seqlens int32 [n + 1] (exclusive scan) from lengths int32 [n]."""
        lv = _ints("lengths", lengths)
        o = self._out("out", out, lv, (lv.shape[0] + 1,), "i32")
        cl = self._mode([lv], [o])
        self._call("cu_seqlens_from_lengths", cl, _Buf(lv), lv.shape[0], _Buf(o))
        return o.obj

    def lengths_from_cu_seqlens(self, cu_seqlens: Array, *, out: Optional[Array] = None) -> Array:
        """lengths int32 [n] from a valid cu_seqlens int32 [n + 1]."""
        cu = _ints("cu_seqlens", cu_seqlens)
        n = max(cu.shape[0] - 1, 0)
        o = self._out("out", out, cu, (n,), "i32")
        cl = self._mode([cu], [o])
        self._call("lengths_from_cu_seqlens", cl, _Buf(cu), cu.shape[0] - 1, _Buf(o))
        return o.obj

    def token_maps(
            self, cu_seqlens: Array, offsets: Optional[Array] = None, *, seq_id: bool = True,
            pos: bool = True, total_tokens: Optional[int] = None,
            seq_id_out: Optional[Array] = None,
            pos_out: Optional[Array] = None) -> Tuple[Optional[Array], Optional[Array]]:
        """Token-to-sequence maps: returns (seq_id, pos), int32 [total_tokens] each.

        seq_id[t] is the sequence of token t (empty sequences skipped), pos[t] =
        t - cu_seqlens[seq_id[t]] + offsets[seq_id[t]] (offsets int32 [n] or None).
        seq_id=False or pos=False leaves that map out (None). total_tokens defaults
        to cu_seqlens[-1] (read back from a PyOpenCL array).
        """
        cu = _ints("cu_seqlens", cu_seqlens)
        n = cu.shape[0] - 1
        off = None if offsets is None else _ints("offsets", offsets)
        if off is not None:
            A.need_shape(off, (n,))
        if total_tokens is None:
            total_tokens = int(self._host_ints(cu)[-1]) if cu.shape[0] else 0
        t = int(total_tokens)
        sid = self._out("seq_id", seq_id_out, cu, (t,), "i32") if seq_id else None
        pv = self._out("pos", pos_out, cu, (t,), "i32") if pos else None
        cl = self._mode([cu, off], [sid, pv])
        self._call("token_maps", cl, _Buf(cu), n, t, _Buf(off), _Buf(sid), _Buf(pv))
        return (sid.obj if sid is not None else None, pv.obj if pv is not None else None)

    def pack(
            self, padded: Array, valid_lens: Optional[Array] = None, *,
            mask: Optional[Array] = None, capacity: Optional[int] = None,
            out: Optional[Array] = None,
            dtype: Optional[str] = None) -> Tuple[Array, Array, Array]:
        """Padded [batch, max_seqlen, *row] -> packed rows (flash-attn unpad_input).

        valid_lens int32 [batch] (a valid prefix per sequence), or mask uint8/bool
        [batch, max_seqlen] (nonzero = keep, holes allowed; :meth:`pack_masked`).
        Returns (packed [total, *row], cu_seqlens int32 [batch + 1], src_index int64
        [total] = b * max_seqlen + s). capacity (default: the exact total) bounds
        the rows; out= [capacity, *row] is filled in its first total rows and the
        result is its view of those rows.
        """
        pv, row = _rows("padded", padded, dtype, 2)
        b, s = pv.shape[0], pv.shape[1]
        if mask is not None:
            mv = A.view("mask", mask)
            A.need_dtype(mv, ("u8",))
            A.need_shape(mv, (b, s))
            A.need_contiguous(mv)
            keep = self._host_ints(mv)
            total = int(np.count_nonzero(keep))
            lens = None
        else:
            if valid_lens is None:
                raise invalid("pack: valid_lens or mask is required")
            mv = None
            lens = _ints("valid_lens", valid_lens)
            A.need_shape(lens, (b,))
            host = self._host_ints(lens)
            total = int(np.clip(host, 0, s).astype(np.int64).sum()) if b else 0
        cap = total if capacity is None else int(capacity)
        ov = self._out_rows("out", out, pv, None if out is not None else (cap,) + pv.shape[2:], 1)
        cap = ov.shape[0]
        A.need_shape(ov, (cap,) + pv.shape[2:])
        A.need_contiguous(ov)
        cu = self._empty(pv, (b + 1,), "i32")
        src = self._empty(pv, (cap,), "i64")
        cl = self._mode([pv, lens, mv], [ov])
        dt, relems = _row_dtype(pv, row)
        pstride = _padded_stride(pv, relems)
        if cl:
            self._call("pack", cl, dt, relems, _Buf(pv), pstride, b, s, _Buf(lens), _Buf(mv),
                       cap, _Buf(ov), _Buf(cu), _Buf(src), _Buf(None))
        elif mv is not None:
            self._call("pack_masked", cl, dt, relems, _Buf(pv), pstride, b, s, _Buf(mv), cap,
                       _Buf(ov), _Buf(cu), _Buf(src), ffi.NULL)
        else:
            self._call("pack", cl, dt, relems, _Buf(pv), pstride, b, s, _Buf(lens), cap,
                       _Buf(ov), _Buf(cu), _Buf(src), ffi.NULL)
        return ov.obj[:total], cu.obj, src.obj[:total]

    def pack_masked(
            self, padded: Array, mask: Array, *, capacity: Optional[int] = None,
            out: Optional[Array] = None,
            dtype: Optional[str] = None) -> Tuple[Array, Array, Array]:
        """pack with a general mask [batch, max_seqlen] (uint8 or bool; nonzero = keep)."""
        return self.pack(padded, mask=mask, capacity=capacity, out=out, dtype=dtype)

    def unpack(
            self, packed: Array, src_index: Array, batch: int, max_seqlen: int, *,
            pad_value: Optional[float] = None, out: Optional[Array] = None,
            dtype: Optional[str] = None) -> Array:
        """Packed [total, *row] -> padded [batch, max_seqlen, *row] (flash-attn pad_input).

        Row src_index[t] (int64 [total], distinct, < batch * max_seqlen) of the
        padded result gets packed row t; the other rows get pad_value (a scalar
        of the packed dtype; None: zero bytes).
        """
        pk, row = _rows("packed", packed, dtype, 1)
        si = _ints("src_index", src_index, "i64")
        A.need_shape(si, (pk.shape[0],))
        b, s = int(batch), int(max_seqlen)
        if b < 0 or s < 0:
            raise invalid("batch and max_seqlen must not be negative")
        ov = self._out_rows("out", out, pk, (b, s) + pk.shape[1:], 2)
        cl = self._mode([pk, si], [ov])
        dt, relems = _row_dtype(pk, row)
        pad = ffi.NULL
        if pad_value is not None:
            if pk.dtype not in _DT or pk.dtype == "u8" and row != relems:
                raise invalid("pad_value needs a packed dtype clvarlen knows")
            pad = ffi.from_buffer(_scalar_bytes(pad_value, pk.dtype))
        self._call("unpack", cl, dt, relems, _Buf(pk), _stride(pk, relems), pk.shape[0],
                   _Buf(si), b, s, pad, _Buf(ov), _padded_stride(ov, relems))
        return ov.obj

    def _out_rows(self, name, out, like, shape, first_dims):
        """An output of rows like `like` (its dtype, any element type): given or new."""
        if out is None:
            if like.dtype in _DT:
                return self._empty(like, shape, like.dtype)
            return A.view(name, self._empty_raw(like, shape))
        v = A.view(name, out, like.dtype if like.dtype in ("bf16", "f16") else None)
        if shape is not None:
            A.need_shape(v, shape)
        A.need_inner_contiguous(v, first_dims)
        if v.dtype != like.dtype or v.itemsize != like.itemsize:
            raise invalid("%s: dtype %s, the input is %s" % (name, v.dtype, like.dtype))
        return v

    def _empty_raw(self, like, shape):
        """An array of like's own element type (one clvarlen does not know: copied bitwise)."""
        if like.kind == "cl":
            import pyopencl.array as cla  # pylint: disable=import-outside-toplevel
            queue = self._queue if self._queue is not None else like.queue
            return cla.empty(queue, shape, like.obj.dtype)
        if like.kind in ("numpy", "torch"):
            mod = np if like.kind == "numpy" else __import__("torch")
            return mod.empty(shape, dtype=like.obj.dtype)
        return np.empty(shape, dtype=np.dtype("V%d" % like.itemsize))

    def gather_rows(
            self, src: Array, index: Array, *, out: Optional[Array] = None,
            dtype: Optional[str] = None) -> Array:
        """dst[m] = src[index[m]] (index int32 [n]; -1 gives a zero row). Returns dst [n, *row]."""
        sv, row = _rows("src", src, dtype, 1)
        iv = _ints("index", index)
        ov = self._out_rows("out", out, sv, (iv.shape[0],) + sv.shape[1:], 1)
        cl = self._mode([sv, iv], [ov])
        dt, relems = _row_dtype(sv, row)
        self._call("gather_rows", cl, dt, relems, _Buf(sv), sv.shape[0], _stride(sv, relems),
                   _Buf(iv), iv.shape[0], _Buf(ov), _stride(ov, relems))
        return ov.obj

    def scatter_rows(
            self, src: Array, index: Array, dst: Array, *, accumulate: bool = False,
            zero_rest: Optional[bool] = False, unique_indices: bool = False,
            dtype: Optional[str] = None) -> Array:
        """dst[index[m]] = src[m] (or += with accumulate=True), in place; returns dst.

        index int32 [n]; -1 skips a row. Overwrite with a repeated index is an
        error; accumulate sums repeats in index order (f32, f16, bf16, i32 rows;
        f16/bf16 summed in f32). zero_rest zeroes the rows of dst no index names.
        """
        sv, row = _rows("src", src, dtype, 1)
        iv = _ints("index", index)
        A.need_shape(sv, (iv.shape[0],) + sv.shape[1:])
        dv, drow = _rows("dst", dst, dtype if dtype else
                         (sv.dtype if sv.dtype in ("bf16", "f16") else None), 1)
        _same_row(sv, dv, row, drow)
        cl = self._mode([sv, iv], [dv])
        dt, relems = _row_dtype(sv, row, accumulate)
        mode = lib.CLVARLEN_SCATTER_ACCUMULATE if accumulate else lib.CLVARLEN_SCATTER_OVERWRITE
        flags = (lib.CLVARLEN_SCATTER_ZERO_REST if zero_rest else 0) | \
            (lib.CLVARLEN_SCATTER_UNIQUE_INDICES if unique_indices else 0)
        self._call("scatter_rows", cl, dt, relems, _Buf(sv), _stride(sv, relems), _Buf(iv),
                   iv.shape[0], _Buf(dv), dv.shape[0], _stride(dv, relems), mode, flags)
        return dv.obj

    def seqlens_expand(
            self, kv_len: Array, q_len: Optional[Array] = None, *, uniform_q_len: int = 0,
            page_table: Optional[Array] = None, col_limit: int = 0, out: Optional[Array] = None,
            page_table_out: Optional[Array] = None) -> Tuple[Array, Optional[Array]]:
        """seqlens_expanded and page-table expansion for speculative decoding (SPEC 2.4).

        kv_len int32 [n] (KV length including the new tokens); q_len int32 [n] or
        None with uniform_q_len. Returns (seqlens_expanded int32 [sum q],
        page_table_out int32 [sum q, col_limit or page_cols] or None): expanded row
        j of sequence s is kv_s - q_s + 1 + j (clamped at 0), its page-table row
        repeated.
        """
        kv = _ints("kv_len", kv_len)
        n = kv.shape[0]
        qv = None if q_len is None else _ints("q_len", q_len)
        if qv is not None:
            A.need_shape(qv, (n,))
            total = int(self._host_ints(qv).astype(np.int64).sum()) if n else 0
        else:
            total = n * int(uniform_q_len)
        pt = None
        cols, pstride, limit = 0, 0, int(col_limit)
        if page_table is not None:
            pt = A.view("page_table", page_table)
            A.need_dtype(pt, ("i32",))
            A.need_shape(pt, (n, None))
            cols = pt.shape[1]
            pstride = A.row_stride(pt, cols)
            limit = limit or cols
        total = max(total, 0)
        sv = self._out("out", out, kv, (total,), "i32")
        po = None
        if pt is not None:
            po = self._out("page_table_out", page_table_out, kv, (total, limit), "i32")
        cl = self._mode([kv, qv, pt], [sv, po])
        ostride = A.row_stride(po, limit) if po is not None else 0
        args = [_Buf(kv), _Buf(qv), int(uniform_q_len), n, _Buf(pt), cols, pstride,
                int(col_limit), total, _Buf(sv), _Buf(po), ostride]
        self._call("seqlens_expand", cl, *(args + [_Buf(None) if cl else ffi.NULL]))
        return sv.obj, (po.obj if po is not None else None)

    def cp_plan(self, cu_seqlens: Array, world: int, rank: int) -> CpPlan:
        """The per-document CP shard plan of rank `rank` of `world` (SPEC 2.5): a CpPlan."""
        cu = _ints("cu_seqlens", cu_seqlens)
        n = cu.shape[0] - 1
        host = self._host_ints(cu)
        cap = int(host[-1]) if cu.shape[0] else 0
        outs = [self._empty(cu, (max(n, 0) + 1,), "i32") for _ in range(3)]
        gi, ps = self._empty(cu, (cap,), "i32"), self._empty(cu, (cap,), "i32")
        cl = self._mode([cu], outs + [gi, ps])
        if cl:
            lt = self._empty(cu, (1,), "i64")
            self._call("cp_plan", cl, _Buf(cu), n, int(world), int(rank), _Buf(outs[0]),
                       _Buf(outs[1]), _Buf(outs[2]), cap, _Buf(gi), _Buf(ps), _Buf(lt))
            local = int(lt.obj.get()[0])
            heads = np.diff(np.asarray(outs[1].obj.get()))
            tails = np.diff(np.asarray(outs[2].obj.get()))
            mh = int(heads.max()) if n > 0 else 0
            mt = int(tails.max()) if n > 0 else 0
        else:
            plan = ffi.new("clvarlen_cp_plan_out *")
            plan.local_cu_seqlens = ffi.cast("int32_t *", outs[0].addr)
            plan.head_cu = ffi.cast("int32_t *", outs[1].addr)
            plan.tail_cu = ffi.cast("int32_t *", outs[2].addr)
            plan.global_index = ffi.cast("int32_t *", gi.addr)
            plan.position = ffi.cast("int32_t *", ps.addr)
            plan.capacity = cap
            self._call("cp_plan_sized", cl, _Buf(cu), n, int(world), int(rank), plan,
                       ffi.sizeof("clvarlen_cp_plan_out"))
            local, mh, mt = int(plan.local_tokens), int(plan.max_head), int(plan.max_tail)
        return CpPlan(outs[0].obj, outs[1].obj, outs[2].obj, gi.obj[:local], ps.obj[:local],
                      local, mh, mt)

    def _local_tokens(self, cu, world, rank):
        host = np.ascontiguousarray(self._host_ints(cu), dtype=np.int32)
        return self.cp_plan(host, world, rank).local_tokens

    def cp_gather(
            self, global_rows: Array, cu_seqlens: Array, world: int, rank: int, *,
            out: Optional[Array] = None, dtype: Optional[str] = None) -> Array:
        """This rank's CP shard rows [local_tokens, *row] of the global packed rows.

        Laid out per document as [chunk rank | chunk 2W-1-rank] (SPEC 2.5).
        """
        gv, row = _rows("global_rows", global_rows, dtype, 1)
        cu = _ints("cu_seqlens", cu_seqlens)
        local = self._local_tokens(cu, world, rank)
        ov = self._out_rows("out", out, gv, (local,) + gv.shape[1:], 1)
        cl = self._mode([gv, cu], [ov])
        dt, relems = _row_dtype(gv, row)
        n = cu.shape[0] - 1
        if cl:
            self._call("cp_gather", cl, dt, relems, _Buf(gv), _stride(gv, relems),
                       gv.shape[0], _Buf(cu), n, int(world), int(rank), _Buf(ov),
                       _stride(ov, relems), ov.shape[0])
        else:
            self._call("cp_gather", cl, dt, relems, _Buf(gv), _stride(gv, relems), _Buf(cu), n,
                       int(world), int(rank), _Buf(ov), _stride(ov, relems), ov.shape[0])
        return ov.obj

    def cp_scatter(
            self, local_rows: Array, cu_seqlens: Array, world: int, rank: int,
            global_rows: Optional[Array] = None, *, accumulate: bool = False,
            zero_rest: Optional[bool] = None, dtype: Optional[str] = None) -> Array:
        """The inverse of cp_gather: local rows -> global rows [cu_seqlens[-1], *row].

        global_rows None: a new zeroed array (the other ranks' rows zero). Given:
        updated in place; accumulate=True adds into it, zero_rest=True zeroes the
        rows this rank does not own.
        """
        lv, row = _rows("local_rows", local_rows, dtype, 1)
        cu = _ints("cu_seqlens", cu_seqlens)
        total = int(self._host_ints(cu)[-1]) if cu.shape[0] else 0
        if global_rows is None:
            gv = self._out_rows("global_rows", None, lv, (total,) + lv.shape[1:], 1)
            zero_rest = True if zero_rest is None and not accumulate else zero_rest
        else:
            gv = self._out_rows("global_rows", global_rows, lv, (total,) + lv.shape[1:], 1)
        cl = self._mode([lv, cu], [gv])
        dt, relems = _row_dtype(lv, row, accumulate)
        mode = lib.CLVARLEN_SCATTER_ACCUMULATE if accumulate else lib.CLVARLEN_SCATTER_OVERWRITE
        flags = lib.CLVARLEN_SCATTER_ZERO_REST if zero_rest else 0
        n = cu.shape[0] - 1
        if cl:
            self._call("cp_scatter", cl, dt, relems, _Buf(lv), _stride(lv, relems),
                       lv.shape[0], _Buf(cu), n, int(world), int(rank), _Buf(gv),
                       _stride(gv, relems), total, mode, flags)
        else:
            self._call("cp_scatter", cl, dt, relems, _Buf(lv), _stride(lv, relems), _Buf(cu), n,
                       int(world), int(rank), _Buf(gv), _stride(gv, relems), mode, flags)
        return gv.obj

    def gen_seq_lens(
            self, seed: int, world: int, n: int, total: int, *,
            out: Optional[Array] = None) -> Array:
        """Reproducible sequence lengths (SPEC 2.6): int32 [world, n], each row summing to
        total, the same on every platform for the same seed."""
        o = self._out("out", out, None, (int(world), int(n)), "i32")
        A.need_contiguous(o)
        cl = self._mode([], [o])
        self._call("gen_seq_lens", cl, ffi.cast("uint64_t", int(seed) & (2**64 - 1)),
                   int(world), int(n), int(total), _Buf(o))
        return o.obj


def _scalar_bytes(value, dtype):
    if dtype == "bf16":
        f = np.array([value], dtype=np.float32).view(np.uint32)
        return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
    return np.array([value], dtype=A.DTYPES[dtype][1]).tobytes()
