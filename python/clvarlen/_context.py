"""The Context: a clvarlen context and one method per public operation."""
import threading

import numpy as np

from . import _arrays as A
from ._clvarlen import ffi, lib
from ._errors import UnsupportedError, error_for, invalid, unsupported

ACT = ("f32", "f16", "bf16")
_NP = {k: v[1] for k, v in A.DTYPES.items()}
_TORCH = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64",
          "i32": "int32", "i64": "int64", "u8": "uint8"}


class _Buf:
    """A tensor argument of a C call: an address on the host path, (cl_mem, offset) on cl."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


def _last_error(ctx):
    return ffi.string(lib.clvarlen_last_error(ctx)).decode("utf-8", "replace")


def _check_global(status):
    if status != lib.CLVARLEN_SUCCESS:
        raise error_for(status, _last_error(ffi.NULL))


def _int(x):
    return int(x)


class Context:
    """A clvarlen context: a device (an OpenCL device or the CPU fallback) and its state.

    ``device``: None (the CLVARLEN_DEVICE environment variable, else the best
    device: discrete GPU, integrated GPU, accelerator, then the CPU fallback),
    ``"cpu"`` (the built-in fallback), ``"opencl"`` (the best OpenCL device, OpenCL
    CPU devices included), ``"pocl"``, a substring of a
    device or platform name, or an index from :func:`clvarlen.devices`.
    ``threads``: CPU worker threads (None: one per physical core).
    ``cache_dir``: the program-binary cache (``"off"`` disables it).
    ``device_checks``: validate device-resident cu_seqlens and indices on the
    PyOpenCL path (blocking). Usable in ``with``; :meth:`close` frees it.

    Arrays: numpy arrays, CPU tensors with ``__dlpack__`` (torch, JAX; bf16
    included) and, on a context made by :meth:`from_pyopencl` or on the same
    OpenCL context, PyOpenCL arrays (then outputs are PyOpenCL arrays and the
    call is enqueued, not waited for). numpy has no bf16: pass uint16 arrays
    with ``dtype="bf16"``. Shapes follow the C API (THD: ``[tokens, heads, dim]``).
    Outputs are allocated when not given (``out=`` reuses a buffer); on any
    error nothing is written to them and a :class:`clvarlen.Error` is raised.
    A context may be shared by threads (calls run one at a time); the GIL is
    released while the library works.
    """

    def __init__(self, device=None, threads=None, cache_dir=None, device_checks=None,
                 kernel_path=None):
        self._ctx = ffi.NULL
        self._lock = threading.Lock()
        self._queue = None
        opts = ffi.new("clvarlen_options **")
        _check_global(lib.clvarlen_options_create(opts))
        try:
            self._configure(opts[0], device, threads, cache_dir, device_checks, kernel_path)
            ctx = ffi.new("clvarlen_context **")
            _check_global(lib.clvarlen_context_create(opts[0], ctx))
            self._ctx = ctx[0]
        finally:
            lib.clvarlen_options_destroy(opts[0])

    @staticmethod
    def _configure(opts, device, threads, cache_dir, device_checks, kernel_path):
        if device is not None:
            spec = str(device) if isinstance(device, int) else device
            if not isinstance(spec, str):
                raise invalid("device: a name, an index or None")
            _check_global(lib.clvarlen_options_set_device(opts, spec.encode()))
        if threads is not None:
            _check_global(lib.clvarlen_options_set_threads(opts, int(threads)))
        if cache_dir is not None:
            _check_global(lib.clvarlen_options_set_cache_dir(opts, str(cache_dir).encode()))
        if kernel_path is not None:
            _check_global(lib.clvarlen_options_set_kernel_path(opts, str(kernel_path).encode()))
        if device_checks is not None:
            _check_global(lib.clvarlen_options_set_device_checks(opts, 1 if device_checks else 0))

    @classmethod
    def from_pyopencl(cls, queue, threads=None, cache_dir=None, device_checks=None):
        """A context on a PyOpenCL command queue: PyOpenCL arrays stay on the user's device
        and every operation is enqueued on ``queue`` (in-order)."""
        if not hasattr(lib, "clvarlen_context_create_cl"):
            raise unsupported("this clvarlen was built without OpenCL")
        self = cls.__new__(cls)
        self._ctx, self._lock, self._queue = ffi.NULL, threading.Lock(), queue
        opts = ffi.new("clvarlen_options **")
        _check_global(lib.clvarlen_options_create(opts))
        try:
            cls._configure(opts[0], None, threads, cache_dir, device_checks, None)
            ctx = ffi.new("clvarlen_context **")
            _check_global(lib.clvarlen_context_create_cl(
                ffi.cast("cl_context", queue.context.int_ptr),
                ffi.cast("cl_device_id", queue.device.int_ptr),
                ffi.cast("cl_command_queue", queue.int_ptr), opts[0], ctx))
            self._ctx = ctx[0]
        finally:
            lib.clvarlen_options_destroy(opts[0])
        return self

    # -------------------------------------------------------------- lifetime
    def close(self):
        """Frees the context (waits for its work); later calls raise InvalidArgumentError."""
        with self._lock:
            if self._ctx != ffi.NULL:
                lib.clvarlen_context_destroy(self._ctx)
                self._ctx = ffi.NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass

    def _handle(self):
        if self._ctx == ffi.NULL:
            raise invalid("the context is closed")
        return self._ctx

    # -------------------------------------------------------------- calls
    def _call(self, name, cl, *args):
        fn = getattr(lib, ("clvarlen_cl_" if cl else "clvarlen_") + name)
        expanded = []
        for a in args:
            if isinstance(a, _Buf):
                v = a.v
                if cl:
                    expanded.append(ffi.cast("cl_mem", v.mem) if v is not None else ffi.NULL)
                    expanded.append(v.offset if v is not None else 0)
                else:
                    expanded.append(ffi.cast("void *", v.addr) if v is not None else ffi.NULL)
            else:
                expanded.append(a)
        if cl:
            expanded += [0, ffi.NULL, ffi.NULL]
        self._call_plain(fn, *expanded)

    def _mode(self, views, outs=()):
        """True for the cl_mem path: every array a PyOpenCL array of this context."""
        present = [v for v in list(views) + list(outs) if v is not None]
        cl = [v for v in present if v.kind == "cl"]
        if not cl:
            for v in outs:
                if v is not None:
                    A.need_writable(v)
            return False
        if len(cl) != len(present):
            raise invalid("mixing PyOpenCL arrays (%s) with host arrays (%s) in one call"
                          % (cl[0].name, [v.name for v in present if v.kind != "cl"][0]))
        ours = self._cl_context()
        for v in cl:
            if v.cl_context != ours:
                raise invalid("%s: a PyOpenCL array of another OpenCL context than this "
                              "clvarlen context's (make the context with "
                              "Context.from_pyopencl(queue))" % v.name)
        return True

    def _cl_context(self):
        if not hasattr(lib, "clvarlen_context_get_cl"):
            raise unsupported("this clvarlen was built without OpenCL")
        c = ffi.new("cl_context *")
        self._call_plain(lib.clvarlen_context_get_cl, c, ffi.NULL, ffi.NULL)
        return int(ffi.cast("uintptr_t", c[0]))

    def _call_plain(self, fn, *args):
        """fn(context, *args) under the context's lock; a failed status raises its Error."""
        with self._lock:
            ctx = self._handle()
            status = fn(ctx, *args)
            msg = _last_error(ctx) if status != lib.CLVARLEN_SUCCESS else ""
        if status != lib.CLVARLEN_SUCCESS:
            raise error_for(status, msg)

    def _empty(self, like, shape, dtype, zero=False):
        """A new output array of the kind of `like` (numpy, torch or PyOpenCL)."""
        shape = tuple(int(s) for s in shape)
        if like is not None and like.kind == "cl":
            import pyopencl.array as cla  # pylint: disable=import-outside-toplevel
            queue = self._queue if self._queue is not None else like.queue
            arr = (cla.zeros if zero else cla.empty)(queue, shape, _NP[dtype])
        elif like is not None and like.kind == "torch":
            import torch  # pylint: disable=import-outside-toplevel
            arr = (torch.zeros if zero else torch.empty)(shape, dtype=getattr(torch, _TORCH[dtype]))
        else:
            arr = (np.zeros if zero else np.empty)(shape, dtype=_NP[dtype])
        v = A.view("out", arr)
        v.dtype = dtype  # bf16 travels as uint16 in numpy and PyOpenCL
        return v

    def _host_ints(self, v):
        """A small int array's values on the host (a blocking read for PyOpenCL arrays)."""
        if v.kind == "cl":
            return np.asarray(v.obj.get())
        if v.kind == "numpy":
            return v.obj
        return np.from_dlpack(v.obj) if hasattr(np, "from_dlpack") else np.asarray(v.obj)

    def _out(self, name, given, like, shape, dtype, zero=False):
        if given is None:
            return self._empty(like, shape, dtype, zero)
        v = A.view(name, given, dtype if dtype in ("bf16", "f16") else None)
        A.need_shape(v, shape)
        A.need_dtype(v, (dtype,))
        return v

    # -------------------------------------------------------------- information
    @property
    def device(self):
        """The context's device (a :class:`clvarlen.DeviceInfo`; index -1: CPU fallback)."""
        from . import _device  # pylint: disable=import-outside-toplevel
        info = ffi.new("clvarlen_device_info *")
        self._call_plain(lib.clvarlen_context_device_sized, info,
                         ffi.sizeof("clvarlen_device_info"))
        return _device.device_info(info)

    @property
    def threads(self):
        """CPU worker threads of the context."""
        return int(lib.clvarlen_context_threads(self._handle()))

    def finish(self) -> None:
        """Blocks until all work queued by the context has finished."""
        self._call_plain(lib.clvarlen_context_finish)

    def precompile(self, ops=("segment", "attention", "attention_backward", "paged",
                              "gated_delta"), dtypes=("bf16",), head_dims=(128,), heads_q=32,
                   heads_kv=8, page_size=16) -> None:
        """Builds, ahead of time, the kernels these ops use for these dtypes and head dims
        (kept in the program cache for later processes; the CPU fallback only runs them).
        ops: names among "segment", "attention", "attention_backward", "paged",
        "gated_delta"."""
        p = ffi.new("clvarlen_precompile_params *")
        lib.clvarlen_precompile_params_init_sized(p, ffi.sizeof("clvarlen_precompile_params"))
        p.ops = _op_bits(ops)
        if len(dtypes) > 4 or len(head_dims) > 8:
            raise invalid("precompile: at most 4 dtypes and 8 head dims")
        for i, d in enumerate(dtypes):
            p.dtypes[i] = _dtype_code(d)
        p.n_dtypes = len(dtypes)
        for i, d in enumerate(head_dims):
            p.head_dims[i] = int(d)
        p.n_head_dims = len(head_dims)
        p.heads_q, p.heads_kv, p.page_size = int(heads_q), int(heads_kv), int(page_size)
        self._call_plain(lib.clvarlen_context_precompile, p)

    def supports(self, op: str, dtype: str = "bf16", head_dim: int = 128, heads_q: int = 32,
                 heads_kv: int = 8) -> bool:
        """Whether `op` ("attention", "paged", ...) takes this dtype and head dim here
        (False with the reason in :attr:`last_reason`); builds its kernels as a side effect."""
        try:
            self._call_plain(lib.clvarlen_supports, _op_bits((op,)), _dtype_code(dtype),
                             int(head_dim), int(heads_q), int(heads_kv))
        except UnsupportedError as e:
            self.last_reason = e.message
            return False
        self.last_reason = ""
        return True


_OPS = {"segment": "CLVARLEN_PRECOMPILE_SEGMENT", "attention": "CLVARLEN_PRECOMPILE_ATTENTION",
        "attention_backward": "CLVARLEN_PRECOMPILE_ATTENTION_BACKWARD",
        "paged": "CLVARLEN_PRECOMPILE_PAGED", "gated_delta": "CLVARLEN_PRECOMPILE_GATED_DELTA"}


def _op_bits(ops):
    bits = 0
    for op in ops:
        if op not in _OPS:
            raise invalid("unknown op group %r (one of %s)" % (op, ", ".join(_OPS)))
        bits |= getattr(lib, _OPS[op])
    return bits


def _dtype_code(name):
    if name not in A.DTYPES:
        raise invalid("unknown dtype %r (one of %s)" % (name, ", ".join(A.DTYPES)))
    return A.DTYPES[name][0]
