"""clvarlen: variable-length (packed, cu_seqlens) kernels for LLM serving on any OpenCL
device or the built-in CPU fallback.

    import numpy as np, clvarlen
    with clvarlen.Context() as ctx:              # best device; "cpu", "pocl", index ...
        lens = clvarlen.gen_seq_lens(seed=1, world=1, n=4, total=256)[0]
        cu = ctx.cu_seqlens_from_lengths(lens)
        q = np.random.randn(256, 8, 64).astype(np.float32)
        k = v = np.random.randn(256, 2, 64).astype(np.float32)
        o, lse = ctx.attention_forward(q, k, v, cu, causal=True, return_lse=True)

Every operation is a method of :class:`Context`, named as the C function without
``clvarlen_``; ``help(clvarlen.Context.attention_forward)`` gives shapes and dtypes.
"""
import atexit
import threading

from ._clvarlen import ffi, lib
from ._context import Context as _Base
from ._device import DeviceInfo, devices, select_device
from ._errors import DeviceError, Error, InvalidArgumentError, OutOfMemoryError, UnsupportedError
from ._ops_attention import AttentionOps
from ._ops_gdn import GdnOps
from ._ops_segment import CpPlan, SegmentOps

__all__ = ["Context", "CpPlan", "DeviceInfo", "DeviceError", "Error", "InvalidArgumentError",
           "OutOfMemoryError", "UnsupportedError", "devices", "gen_seq_lens", "select_device",
           "version", "version_info"]

version = ffi.string(lib.clvarlen_version_string()).decode()
"""The version of the library loaded ("MAJOR.MINOR.PATCH")."""
version_info = tuple(int(x) for x in version.split("."))


class Context(AttentionOps, SegmentOps, GdnOps, _Base):
    __doc__ = _Base.__doc__


_cpu = None
_cpu_lock = threading.Lock()


def gen_seq_lens(seed, world, n, total):
    """Reproducible sequence lengths (SPEC 2.6): int32 numpy [world, n], each row summing
    to total, identical on every platform for the same seed (computed on the CPU)."""
    global _cpu  # pylint: disable=global-statement
    with _cpu_lock:
        if _cpu is None:
            _cpu = Context(device="cpu", threads=1)
            atexit.register(_cpu.close)
    return _cpu.gen_seq_lens(seed, world, n, total)
