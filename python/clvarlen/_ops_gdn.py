"""The gated delta rule (SPEC 3): the fused sigmoid-gating delta-rule update."""
from typing import Optional, Tuple, Union

from . import _arrays as A
from ._arrays import Array
from ._clvarlen import ffi, lib
from ._context import ACT, _Buf
from ._errors import invalid

_DT = {k: v[0] for k, v in A.DTYPES.items()}
_LAYOUT = {"vk": lib.CLVARLEN_STATE_VK, "kv": lib.CLVARLEN_STATE_KV}
_ALGO = {"auto": lib.CLVARLEN_GDN_AUTO, "recurrent": lib.CLVARLEN_GDN_RECURRENT,
         "chunked": lib.CLVARLEN_GDN_CHUNKED}


def _choice(name, value, table):
    if value not in table:
        raise invalid("%s: one of %s, got %r" % (name, ", ".join(sorted(table)), value))
    return table[value]


def _tok(name, obj, dtype, like, shape):
    """A token-major activation [T, heads(, dim)] with packed inner dimensions."""
    v = A.view(name, obj, dtype)
    A.need_dtype(v, ACT if like is None else (like.dtype,))
    A.need_shape(v, shape)
    return v


def _idx(name, obj, n):
    if obj is None:
        return None
    v = A.view(name, obj)
    A.need_dtype(v, ("i32",))
    A.need_shape(v, (n,))
    A.need_contiguous(v)
    return v


class GdnOps:
    """The gated delta rule method of :class:`clvarlen.Context`."""

    def gated_delta_rule(
            self, q: Array, k: Array, v: Array, a: Array, b: Array, A_log: Array, dt_bias: Array,
            cu_seqlens: Optional[Array] = None, *, fixed_seqlen: int = 0,
            state_pool: Optional[Array] = None, state_indices: Optional[Array] = None,
            intermediate_states: Optional[Array] = None, cache_indices: Optional[Array] = None,
            scale: Optional[float] = None, use_qk_l2norm: bool = False,
            softplus_beta: float = 1.0, softplus_threshold: float = 20.0,
            disable_state_update: bool = False, state_layout: str = "vk", algorithm: str = "auto",
            out: Optional[Array] = None, dtype: Optional[str] = None,
            state_dtype: Optional[str] = None, dt_bias_dtype: Optional[str] = None) -> Array:
        """The fused sigmoid-gating delta-rule update (SPEC 3); returns o [T, HV, V].

        q, k [T, H, K]; v [T, HV, V]; a, b [T, HV] (f32, f16 or bf16, one dtype; rows
        may be strided, e.g. views of one fused projection); A_log f32 [HV];
        dt_bias [HV] (f32, f16 or bf16). cu_seqlens int32 [N + 1], or None with
        fixed_seqlen L (sequence n is tokens [nL, (n+1)L)). state_pool [slots, HV, V, K]
        (state_layout "vk"; "kv": [slots, HV, K, V]; f32, f16 or bf16; slots may be
        strided) is read and updated in place per sequence at slot state_indices[n]
        (int32 [N]; None: slot n; negative: zero state, nothing written).
        intermediate_states [cache_slots, cache_steps, HV, V, K] (target verify)
        receives the state after each token at cache_indices[n] (None: slot n).
        algorithm: "auto", "recurrent" or "chunked"; scale None is 1/sqrt(K).
        """
        qv = _tok("q", q, dtype, None, (None, None, None))
        t, h, kd = qv.shape
        kv = _tok("k", k, dtype, qv, (t, h, kd))
        vv = _tok("v", v, dtype, qv, (t, None, None))
        hv, vd = vv.shape[1], vv.shape[2]
        av = _tok("a", a, dtype, qv, (t, hv))
        bv = _tok("b", b, dtype, qv, (t, hv))
        alog = A.view("A_log", A_log)
        A.need_dtype(alog, ("f32",))
        A.need_shape(alog, (hv,))
        A.need_contiguous(alog)
        dtb = A.view("dt_bias", dt_bias, dt_bias_dtype)
        A.need_dtype(dtb, ACT)
        A.need_shape(dtb, (hv,))
        A.need_contiguous(dtb)
        p = ffi.new("clvarlen_gdn_params *")
        lib.clvarlen_gdn_params_init_sized(p, ffi.sizeof("clvarlen_gdn_params"))
        p.dtype, p.dt_bias_dtype = _DT[qv.dtype], _DT[dtb.dtype]
        cu = None
        if cu_seqlens is not None:
            cu = A.view("cu_seqlens", cu_seqlens)
            A.need_dtype(cu, ("i32",))
            if cu.ndim != 1 or cu.shape[0] < 1:
                raise invalid("cu_seqlens: a 1-d int32 array of N + 1 entries")
            A.need_contiguous(cu)
            n = cu.shape[0] - 1
        else:
            if int(fixed_seqlen) <= 0 or t % int(fixed_seqlen):
                raise invalid("without cu_seqlens, fixed_seqlen must be positive and divide "
                              "the %d tokens" % t)
            n = t // int(fixed_seqlen)
            p.fixed_seqlen = int(fixed_seqlen)
        p.n_seqs, p.total_tokens = n, t
        p.heads_qk, p.heads_v, p.key_dim, p.value_dim = h, hv, kd, vd
        p.q_stride, p.k_stride = A.row_stride(qv, h * kd), A.row_stride(kv, h * kd)
        p.v_stride = A.row_stride(vv, hv * vd)
        p.a_stride, p.b_stride = A.row_stride(av, hv), A.row_stride(bv, hv)
        p.state_layout = _choice("state_layout", state_layout, _LAYOUT)
        p.algorithm = _choice("algorithm", algorithm, _ALGO)
        inner = (hv, vd, kd) if state_layout == "vk" else (hv, kd, vd)
        sp = None
        if state_pool is not None:
            sp = A.view("state_pool", state_pool, state_dtype)
            A.need_dtype(sp, ACT)
            A.need_shape(sp, (None,) + inner)
            p.state_dtype = _DT[sp.dtype]
            p.state_slots = sp.shape[0]
            p.state_slot_pitch = A.row_stride(sp, hv * vd * kd)
        si = _idx("state_indices", state_indices, n)
        ist = None
        if intermediate_states is not None:
            ist = A.view("intermediate_states", intermediate_states, state_dtype)
            A.need_dtype(ist, (sp.dtype,) if sp is not None else ACT)
            A.need_shape(ist, (None, None) + inner)
            A.need_contiguous(ist)
            if sp is None:
                p.state_dtype = _DT[ist.dtype]
            p.cache_slots, p.cache_steps = ist.shape[0], ist.shape[1]
        ci = _idx("cache_indices", cache_indices, n)
        p.scale = 0.0 if scale is None else float(scale)
        p.use_qk_l2norm = 1 if use_qk_l2norm else 0
        p.softplus_beta, p.softplus_threshold = float(softplus_beta), float(softplus_threshold)
        p.disable_state_update = 1 if disable_state_update else 0
        o = self._out("out", out, qv, (t, hv, vd), qv.dtype)
        p.o_stride = A.row_stride(o, hv * vd)
        outs = [o] + ([sp] if sp is not None and not disable_state_update else []) + [ist]
        ins = [qv, kv, vv, av, bv, alog, dtb, cu, si, ci] + \
            ([sp] if sp is not None and disable_state_update else [])
        cl = self._mode(ins, outs)
        self._call("gated_delta_rule", cl, p, _Buf(alog), _Buf(dtb), _Buf(av), _Buf(bv),
                   _Buf(qv), _Buf(kv), _Buf(vv), _Buf(cu), _Buf(sp), _Buf(si), _Buf(ist),
                   _Buf(ci), _Buf(o))
        return o.obj
