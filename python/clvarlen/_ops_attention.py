"""Varlen attention (SPEC 1): forward, backward, LSE merges, paged KV cache."""
import math

from typing import Optional, Tuple, Union

from . import _arrays as A
from ._arrays import Array
from ._clvarlen import ffi, lib
from ._context import ACT, _Buf
from ._errors import invalid

_DT = {k: v[0] for k, v in A.DTYPES.items()}


def _cu(name, obj, n=None):
    v = A.view(name, obj)
    A.need_dtype(v, ("i32",))
    if v.ndim != 1 or v.shape[0] < 1 or (n is not None and v.shape[0] != n + 1):
        raise invalid("%s: a 1-d int32 array of N + 1 entries%s, got shape %s"
                      % (name, "" if n is None else " (N = %d)" % n, list(v.shape)))
    A.need_contiguous(v)
    return v


def _act(name, obj, dtype, ndim, like=None):
    v = A.view(name, obj, dtype)
    A.need_dtype(v, ACT if like is None else (like.dtype,))
    if v.ndim != ndim:
        raise invalid("%s: %d dimensions expected, got shape %s" % (name, ndim, list(v.shape)))
    return v


def _f32(name, obj, shape):
    v = A.view(name, obj)
    A.need_dtype(v, ("f32",))
    A.need_shape(v, shape)
    A.need_contiguous(v)
    return v


def _window(window_size):
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        raise invalid("window_size: a pair (left, right), -1 = unbounded") from None


def _scale(softmax_scale):
    if softmax_scale is None:
        return 0.0
    s = float(softmax_scale)
    if s == 0.0 or not math.isfinite(s):
        raise invalid("softmax_scale: a finite nonzero number or None (1/sqrt(head_dim))")
    return s


class AttentionOps:
    """Attention methods of :class:`clvarlen.Context`."""

    def _attn_params(self, q, k, v, cu_q, cu_k, opts):
        p = ffi.new("clvarlen_attention_params *")
        lib.clvarlen_attention_params_init_sized(p, ffi.sizeof("clvarlen_attention_params"))
        n = cu_q.shape[0] - 1
        if cu_k.shape[0] != n + 1:
            raise invalid("cu_seqlens_k: %d entries, cu_seqlens_q has %d"
                          % (cu_k.shape[0], n + 1))
        tq, hq, d = q.shape
        tk, hk, dk = k.shape
        if dk != d or v.shape[0] != tk or v.shape[1] != hk:
            raise invalid("k %s and v %s must be [total_k, heads_kv, head_dim(_v)] with q's "
                          "head_dim %d" % (list(k.shape), list(v.shape), d))
        dv = v.shape[2]
        p.dtype, p.n_seqs, p.total_q, p.total_k = _DT[q.dtype], n, tq, tk
        p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v = hq, hk, d, dv
        p.q_stride = A.row_stride(q, hq * d)
        p.k_stride = A.row_stride(k, hk * d)
        p.v_stride = A.row_stride(v, hk * dv)
        p.max_seqlen_q, p.max_seqlen_k = int(opts["max_seqlen_q"]), int(opts["max_seqlen_k"])
        p.scale = _scale(opts["softmax_scale"])
        p.causal = 1 if opts["causal"] else 0
        p.window_left, p.window_right = _window(opts["window_size"])
        p.softcap = float(opts["softcap"])
        p.dropout_p = float(opts["dropout_p"])
        p.dropout_seed = int(opts["dropout_seed"])
        p.dropout_offset = int(opts["dropout_offset"])
        return p

    def _attn_setup(self, a):
        """Views and the C params from the arguments of attention_forward/_backward."""
        q, k, v, cu_q, cu_k, qp = self._attn_inputs(a["q"], a["k"], a["v"], a["cu_seqlens_q"],
                                                    a["cu_seqlens_k"], a["q_pos"], a["dtype"])
        return q, k, v, cu_q, cu_k, qp, self._attn_params(q, k, v, cu_q, cu_k, a)

    def _attn_inputs(self, q, k, v, cu_seqlens_q, cu_seqlens_k, q_pos, dtype):
        q = _act("q", q, dtype, 3)
        k = _act("k", k, dtype, 3, q)
        v = _act("v", v, dtype, 3, q)
        cu_q = _cu("cu_seqlens_q", cu_seqlens_q)
        cu_k = cu_q if cu_seqlens_k is None else _cu("cu_seqlens_k", cu_seqlens_k)
        qp = None
        if q_pos is not None:
            qp = A.view("q_pos", q_pos)
            A.need_dtype(qp, ("i32",))
            A.need_shape(qp, (q.shape[0],))
            A.need_contiguous(qp)
        return q, k, v, cu_q, cu_k, qp

    def attention_forward(
            self, q: Array, k: Array, v: Array, cu_seqlens_q: Array,
            cu_seqlens_k: Optional[Array] = None, *, max_seqlen_q: int = 0, max_seqlen_k: int = 0,
            softmax_scale: Optional[float] = None, causal: bool = False,
            window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, dropout_p: float = 0.0,
            dropout_seed: int = 0, dropout_offset: int = 0, q_pos: Optional[Array] = None,
            return_lse: bool = False, out: Optional[Array] = None, lse: Optional[Array] = None,
            dtype: Optional[str] = None) -> Union[Array, Tuple[Array, Array]]:
        """Varlen attention forward (SPEC 1), as flash_attn_varlen_func.

        q [total_q, heads_q, head_dim], k [total_k, heads_kv, head_dim],
        v [total_k, heads_kv, head_dim_v]: f32, f16 or bf16 (one dtype; rows may
        be strided, heads and dim contiguous). cu_seqlens_q/_k: int32 [N + 1]
        (cu_seqlens_k None: the same as cu_seqlens_q). causal is bottom-right
        aligned; window_size=(left, right), -1 unbounded; softmax_scale None is
        1/sqrt(head_dim); q_pos int32 [total_q] replaces each query's position
        (context-parallel shards). Returns out [total_q, heads_q, head_dim_v] in
        q's dtype, and with return_lse=True (or lse= given) also
        lse [heads_q, total_q] f32 (natural log of the softmax denominator,
        -inf for a row that sees no key).
        """
        q, k, v, cu_q, cu_k, qp, p = self._attn_setup(locals())
        tq, hq, dv = q.shape[0], q.shape[1], v.shape[2]
        o = self._out("out", out, q, (tq, hq, dv), q.dtype)
        p.o_stride = A.row_stride(o, hq * dv)
        lv = None
        if lse is not None:
            lv = _f32("lse", lse, (hq, tq))
        cl = self._mode([q, k, v, cu_q, cu_k, qp], [o, lv])
        if lv is None and return_lse:
            lv = self._empty(q, (hq, tq), "f32")
        self._call("attention_forward", cl, p, _Buf(q), _Buf(k), _Buf(v), _Buf(cu_q),
                   _Buf(cu_k), _Buf(qp), _Buf(o), _Buf(lv))
        return (o.obj, lv.obj) if (return_lse or lse is not None) else o.obj

    def attention_backward(
            self, dout: Array, q: Array, k: Array, v: Array, out: Array, lse: Array,
            cu_seqlens_q: Array, cu_seqlens_k: Optional[Array] = None, *, max_seqlen_q: int = 0,
            max_seqlen_k: int = 0, softmax_scale: Optional[float] = None, causal: bool = False,
            window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, dropout_p: float = 0.0,
            dropout_seed: int = 0, dropout_offset: int = 0, q_pos: Optional[Array] = None,
            grad_f32: bool = False, deterministic: bool = True, dq: Optional[Array] = None,
            dk: Optional[Array] = None, dv: Optional[Array] = None,
            dtype: Optional[str] = None) -> Tuple[Array, Array, Array]:
        """Varlen attention backward (SPEC 1.2): returns (dq, dk, dv).

        dout and out [total_q, heads_q, head_dim_v] and lse [heads_q, total_q] f32
        as attention_forward returned them, with the same inputs and options
        (dropout seed and offset included: the mask is regenerated). dq, dk, dv
        have the shapes of q, k, v, in their dtype (f32 with grad_f32=True),
        accumulated in f32; for GQA dk and dv sum over each KV head's query heads.
        Deterministic: bitwise the same on every run and thread count.
        """
        q, k, v, cu_q, cu_k, qp, p = self._attn_setup(locals())
        tq, hq, d = q.shape
        tk, hk, dvd = v.shape
        o = _act("out", out, dtype, 3, q)
        A.need_shape(o, (tq, hq, dvd))
        do = _act("dout", dout, dtype, 3, q)
        A.need_shape(do, (tq, hq, dvd))
        lv = _f32("lse", lse, (hq, tq))
        p.o_stride = A.row_stride(o, hq * dvd)
        gdt = "f32" if grad_f32 else q.dtype
        outs = [(dq, "dq", q, (tq, hq, d)), (dk, "dk", k, (tk, hk, d)),
                (dv, "dv", v, (tk, hk, dvd))]
        given = [None if g is None else self._out(n, g, like, shape, gdt)
                 for g, n, like, shape in outs]
        cl = self._mode([q, k, v, cu_q, cu_k, qp, o, do, lv], given)
        grads = [g if g is not None else self._empty(q, shape, gdt)
                 for g, (_, _, _, shape) in zip(given, outs)]
        b = ffi.new("clvarlen_attention_bwd_params *")
        lib.clvarlen_attention_bwd_params_init_sized(b, ffi.sizeof(
            "clvarlen_attention_bwd_params"))
        b.do_stride = A.row_stride(do, hq * dvd)
        b.dq_stride = A.row_stride(grads[0], hq * d)
        b.dk_stride = A.row_stride(grads[1], hk * d)
        b.dv_stride = A.row_stride(grads[2], hk * dvd)
        b.grad_f32 = 1 if grad_f32 else 0
        b.deterministic = 1 if deterministic else 0
        self._call("attention_backward", cl, p, b, _Buf(q), _Buf(k), _Buf(v), _Buf(o),
                   _Buf(do), _Buf(lv), _Buf(cu_q), _Buf(cu_k), _Buf(qp), _Buf(grads[0]),
                   _Buf(grads[1]), _Buf(grads[2]))
        return tuple(g.obj for g in grads)

    def attention_merge(
            self, o_parts: Array, lse_parts: Array, *, return_lse: bool = False,
            out: Optional[Array] = None, lse: Optional[Array] = None,
            dtype: Optional[str] = None) -> Union[Array, Tuple[Array, Array]]:
        """N-way LSE merge of partial attention results of the same rows.

        o_parts [n_parts, tokens, heads, head_dim_v] (f32, f16 or bf16, contiguous),
        lse_parts [n_parts, heads, tokens] f32. Returns out [tokens, heads,
        head_dim_v] (and lse [heads, tokens] with return_lse=True):
        lse = log(sum exp(lse_p)), out = sum exp(lse_p - lse) o_p.
        """
        op = _act("o_parts", o_parts, dtype, 4)
        A.need_contiguous(op)
        n, t, h, dvd = op.shape
        lp = _f32("lse_parts", lse_parts, (n, h, t))
        o = self._out("out", out, op, (t, h, dvd), op.dtype)
        A.need_contiguous(o)
        lv = None if lse is None else _f32("lse", lse, (h, t))
        cl = self._mode([op, lp], [o, lv])
        if lv is None and return_lse:
            lv = self._empty(op, (h, t), "f32")
        self._call("attention_merge", cl, _DT[op.dtype], n, t, h, dvd, _Buf(op), _Buf(lp),
                   _Buf(o), _Buf(lv))
        return (o.obj, lv.obj) if (return_lse or lse is not None) else o.obj

    def attention_merge2(
            self, o_a: Array, lse_a: Array, o_b: Array, lse_b: Array, *,
            out: Optional[Array] = None, lse: Optional[Array] = None,
            dtype: Optional[str] = None) -> Tuple[Array, Array]:
        """Two-way LSE merge (a ring-attention step): returns (out, lse).

        o_a, o_b [tokens, heads, head_dim_v] (contiguous), lse_a, lse_b
        [heads, tokens] f32. In place is allowed: out=o_a (or o_b), lse=lse_a
        (or lse_b).
        """
        oa = _act("o_a", o_a, dtype, 3)
        ob = _act("o_b", o_b, dtype, 3, oa)
        A.need_shape(ob, oa.shape)
        A.need_contiguous(oa)
        A.need_contiguous(ob)
        t, h, dvd = oa.shape
        la = _f32("lse_a", lse_a, (h, t))
        lb = _f32("lse_b", lse_b, (h, t))
        o = self._out("out", out, oa, (t, h, dvd), oa.dtype)
        A.need_contiguous(o)
        lv = None if lse is None else _f32("lse", lse, (h, t))
        cl = self._mode([oa, ob, la, lb], [o, lv])
        if lv is None:
            lv = self._empty(oa, (h, t), "f32")
        self._call("attention_merge2", cl, _DT[oa.dtype], t, h, dvd, _Buf(oa), _Buf(la),
                   _Buf(ob), _Buf(lb), _Buf(o), _Buf(lv))
        return o.obj, lv.obj

    def kv_cache_append(
            self, k: Array, v: Array, slot_mapping: Array, k_cache: Array, v_cache: Array, *,
            dtype: Optional[str] = None, cache_dtype: Optional[str] = None) -> None:
        """Writes new tokens' K and V rows into a paged cache (vLLM's reshape_and_cache).

        k [n_tokens, heads_kv, head_dim], v [n_tokens, heads_kv, head_dim_v] (f32, f16,
        bf16), slot_mapping int64 [n_tokens] (slot = page * page_size + offset, -1 =
        skip), k_cache [num_pages, page_size, heads_kv, head_dim] and v_cache
        [num_pages, page_size, heads_kv, head_dim_v], contiguous, updated in place
        (their dtype may differ from k's: rounded to nearest even).
        """
        kv = _act("k", k, dtype, 3)
        vv = _act("v", v, dtype, 3, kv)
        sm = A.view("slot_mapping", slot_mapping)
        A.need_dtype(sm, ("i64",))
        A.need_shape(sm, (kv.shape[0],))
        A.need_contiguous(sm)
        kc = _act("k_cache", k_cache, cache_dtype, 4)
        vc = _act("v_cache", v_cache, cache_dtype, 4, kc)
        nt, hk, d = kv.shape
        A.need_shape(vv, (nt, hk, None))
        dvd = vv.shape[2]
        A.need_shape(kc, (None, None, hk, d))
        A.need_shape(vc, (kc.shape[0], kc.shape[1], hk, dvd))
        A.need_contiguous(kc)
        A.need_contiguous(vc)
        p = ffi.new("clvarlen_kv_append_params *")
        lib.clvarlen_kv_append_params_init_sized(p, ffi.sizeof("clvarlen_kv_append_params"))
        p.dtype, p.cache_dtype = _DT[kv.dtype], _DT[kc.dtype]
        p.n_tokens, p.num_pages, p.page_size = nt, kc.shape[0], kc.shape[1]
        p.heads_kv, p.head_dim, p.head_dim_v = hk, d, dvd
        p.k_stride, p.v_stride = A.row_stride(kv, hk * d), A.row_stride(vv, hk * dvd)
        cl = self._mode([kv, vv, sm], [kc, vc])
        self._call("kv_cache_append", cl, p, _Buf(kv), _Buf(vv), _Buf(sm), _Buf(kc), _Buf(vc))

    def paged_attention_forward(
            self, q: Array, k_cache: Array, v_cache: Array, cu_seqlens_q: Array,
            page_table: Array, cache_seqlens: Array, *, max_seqlen_q: int = 0,
            softmax_scale: Optional[float] = None, causal: bool = False,
            window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0, num_splits: int = 0,
            return_lse: bool = False, out: Optional[Array] = None, lse: Optional[Array] = None,
            dtype: Optional[str] = None) -> Union[Array, Tuple[Array, Array]]:
        """Paged attention forward (SPEC 1.1): decode, speculative verify, chunked prefill.

        q [total_q, heads_q, head_dim]; k_cache [num_pages, page_size, heads_kv, head_dim],
        v_cache [num_pages, page_size, heads_kv, head_dim_v] (contiguous, q's dtype);
        cu_seqlens_q int32 [B + 1]; page_table int32 [B, max_pages] (rows may be
        strided); cache_seqlens int32 [B] (tokens in the cache, new ones included):
        query i of row b sits at cache_seqlens[b] - len_q[b] + i. num_splits 0 =
        automatic split-KV. Returns out [total_q, heads_q, head_dim_v] (and lse
        [heads_q, total_q] f32 with return_lse=True).
        """
        qv = _act("q", q, dtype, 3)
        kc = _act("k_cache", k_cache, dtype, 4, qv)
        vc = _act("v_cache", v_cache, dtype, 4, qv)
        cu = _cu("cu_seqlens_q", cu_seqlens_q)
        b = cu.shape[0] - 1
        pt = A.view("page_table", page_table)
        A.need_dtype(pt, ("i32",))
        A.need_shape(pt, (b, None))
        cs = A.view("cache_seqlens", cache_seqlens)
        A.need_dtype(cs, ("i32",))
        A.need_shape(cs, (b,))
        A.need_contiguous(cs)
        tq, hq, d = qv.shape
        A.need_shape(kc, (None, None, None, d))
        A.need_shape(vc, kc.shape[:3] + (None,))
        A.need_contiguous(kc)
        A.need_contiguous(vc)
        dvd = vc.shape[3]
        p = ffi.new("clvarlen_paged_params *")
        lib.clvarlen_paged_params_init_sized(p, ffi.sizeof("clvarlen_paged_params"))
        p.dtype, p.n_rows, p.total_q = _DT[qv.dtype], b, tq
        p.num_pages, p.page_size = kc.shape[0], kc.shape[1]
        p.max_pages = pt.shape[1]
        p.page_table_stride = A.row_stride(pt, pt.shape[1]) if b > 0 else 0
        p.heads_q, p.heads_kv, p.head_dim, p.head_dim_v = hq, kc.shape[2], d, dvd
        p.q_stride = A.row_stride(qv, hq * d)
        p.max_seqlen_q, p.scale = int(max_seqlen_q), _scale(softmax_scale)
        p.causal = 1 if causal else 0
        p.window_left, p.window_right = _window(window_size)
        p.softcap, p.num_splits = float(softcap), int(num_splits)
        o = self._out("out", out, qv, (tq, hq, dvd), qv.dtype)
        p.o_stride = A.row_stride(o, hq * dvd)
        lv = None if lse is None else _f32("lse", lse, (hq, tq))
        cl = self._mode([qv, kc, vc, cu, pt, cs], [o, lv])
        if lv is None and return_lse:
            lv = self._empty(qv, (hq, tq), "f32")
        self._call("paged_attention_forward", cl, p, _Buf(qv), _Buf(kc), _Buf(vc), _Buf(cu),
                   _Buf(pt), _Buf(cs), _Buf(o), _Buf(lv))
        return (o.obj, lv.obj) if (return_lse or lse is not None) else o.obj
