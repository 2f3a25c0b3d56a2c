"""float64 numpy references of the operations (SPEC 1-3), naive and obviously right."""
import numpy as np


def bf16_to_f32(u):
    return (np.asarray(u, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    f = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)


def as_f64(x, dtype):
    return bf16_to_f32(x).astype(np.float64) if dtype == "bf16" else np.asarray(x, np.float64)


def rel_err(out, ref):
    """||out - ref|| / ||ref||; NaN or Inf where ref is finite always fails (returns inf)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(out[np.isfinite(ref)])):
        return np.inf
    mask = np.isfinite(ref)
    if not np.array_equal(np.isfinite(out), mask) or not np.array_equal(out[~mask], ref[~mask]):
        return np.inf
    num = np.linalg.norm(out[mask] - ref[mask])
    den = np.linalg.norm(ref[mask])
    return num / den if den > 0 else num


TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}


def _mask(lq, lk, causal, window, q_pos):
    pos = (np.arange(lq) + lk - lq) if q_pos is None else np.asarray(q_pos)
    pos = pos[:, None]
    j = np.arange(lk)[None, :]
    keep = np.ones((lq, lk), bool)
    if causal:
        keep &= j <= pos
    if window[0] >= 0:
        keep &= j >= pos - window[0]
    if window[1] >= 0:
        keep &= j <= pos + window[1]
    return keep


def attention(q, k, v, cu_q, cu_k, causal=False, window=(-1, -1), softcap=0.0, scale=None,
              q_pos=None):
    """Returns o [Tq, Hq, Dv], lse [Hq, Tq] (float64)."""
    tq, hq, d = q.shape
    hk, dv = k.shape[1], v.shape[2]
    g = hq // hk
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    o = np.zeros((tq, hq, dv))
    lse = np.full((hq, tq), -np.inf)
    for s in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
        keep = _mask(q1 - q0, k1 - k0, causal, window,
                     None if q_pos is None else q_pos[q0:q1])
        for h in range(hq):
            sc = q[q0:q1, h] @ k[k0:k1, h // g].T * scale
            if softcap > 0:
                sc = softcap * np.tanh(sc / softcap)
            sc = np.where(keep, sc, -np.inf)
            for i in range(q1 - q0):
                if not keep[i].any():
                    continue
                m = sc[i].max()
                p = np.exp(sc[i] - m)
                lse[h, q0 + i] = m + np.log(p.sum())
                o[q0 + i, h] = p @ v[k0:k1, h // g] / p.sum()
    return o, lse


def attention_backward(do, q, k, v, o, lse, cu_q, cu_k, causal=False, window=(-1, -1),
                       scale=None):
    """dq, dk, dv (float64) without softcap or dropout."""
    tq, hq, d = q.shape
    hk = k.shape[1]
    g = hq // hk
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for s in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]
        keep = _mask(q1 - q0, k1 - k0, causal, window, None)
        for h in range(hq):
            kh = h // g
            fin = np.isfinite(lse[h, q0:q1])[:, None]
            sc = q[q0:q1, h] @ k[k0:k1, kh].T * scale
            p = np.where(keep & fin, np.exp(sc - np.where(fin, lse[h, q0:q1][:, None], 0)), 0)
            dov = do[q0:q1, h]
            dv[k0:k1, kh] += p.T @ dov
            dp = dov @ v[k0:k1, kh].T
            delta = (dov * o[q0:q1, h]).sum(-1, keepdims=True)
            ds = p * (dp - delta)
            dq[q0:q1, h] += ds @ k[k0:k1, kh] * scale
            dk[k0:k1, kh] += ds.T @ q[q0:q1, h] * scale
    return dq, dk, dv


def merge(o_parts, lse_parts):
    lse_parts = np.where(np.isnan(lse_parts) | (lse_parts == np.inf), -np.inf, lse_parts)
    m = lse_parts.max(axis=0)
    finite = np.isfinite(m)
    ms = np.where(finite, m, 0)
    w = np.exp(lse_parts - ms)
    tot = w.sum(0)
    lse = np.where(finite, ms + np.log(np.where(finite, tot, 1)), -np.inf)
    wn = np.where(finite, w / np.where(finite, tot, 1), 0)  # [P, H, T]
    o = np.einsum("pht,pthd->thd", wn, np.where(np.isfinite(lse_parts).transpose(0, 2, 1)
                                                [..., None], o_parts, 0))
    return o, lse


def gdn(q, k, v, a, b, A_log, dt_bias, cu, pool=None, idx=None, scale=None, l2norm=False,
        layout="vk", disable_update=False):
    """o [T, HV, V] and the new pool (float64), SPEC 3 token by token."""
    t, h, kd = q.shape
    hv, vd = v.shape[1], v.shape[2]
    scale = 1.0 / np.sqrt(kd) if scale is None else scale
    o = np.zeros((t, hv, vd))
    newpool = None if pool is None else np.array(pool, np.float64)
    for n in range(len(cu) - 1):
        slot = -1 if pool is None else (n if idx is None else idx[n])
        for hh in range(hv):
            hq = hh // (hv // h)
            if slot >= 0:
                st = pool[slot, hh]
                s = (st.T if layout == "vk" else st).astype(np.float64).copy()  # [K, V]
            else:
                s = np.zeros((kd, vd))
            for tt in range(cu[n], cu[n + 1]):
                x = a[tt, hh] + dt_bias[hh]
                sp = np.log1p(np.exp(x)) if x <= 20.0 else x
                gg = -np.exp(A_log[hh]) * sp
                beta = 1.0 / (1.0 + np.exp(-b[tt, hh]))
                qv, kv = q[tt, hq].copy(), k[tt, hq].copy()
                if l2norm:
                    qv /= np.sqrt((qv * qv).sum() + 1e-6)
                    kv /= np.sqrt((kv * kv).sum() + 1e-6)
                qv *= scale
                s *= np.exp(gg)
                u = beta * (v[tt, hh] - s.T @ kv)
                s += np.outer(kv, u)
                o[tt, hh] = s.T @ qv
            if slot >= 0 and cu[n + 1] > cu[n] and not disable_update:
                newpool[slot, hh] = s.T if layout == "vk" else s
    return o, newpool


def cp_local_index(cu, world, rank):
    """Global token of each local token of `rank` (SPEC 2.5 head-tail split)."""
    out = []
    for s in range(len(cu) - 1):
        length = cu[s + 1] - cu[s]
        chunks = 2 * world
        base, extra = divmod(length, chunks)
        sizes = [base + (1 if c < extra else 0) for c in range(chunks)]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        for c in (rank, chunks - 1 - rank):
            out.extend(range(cu[s] + starts[c], cu[s] + starts[c] + sizes[c]))
    return np.array(out, np.int64)
