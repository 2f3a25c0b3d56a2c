"""Arrays in and out: numpy, DLPack producers (torch, JAX) and PyOpenCL arrays.

A View describes an argument without copying it: its address (host) or its
cl_mem and byte offset (PyOpenCL), shape, strides in elements and clvarlen
dtype. Outputs are allocated as the same kind of array as the call's inputs.
"""
import ctypes
from typing import Any

import numpy as np

from ._clvarlen import ffi, lib
from ._errors import invalid, unsupported

Array = Any
"""An array argument or result: a numpy array, a CPU tensor with ``__dlpack__`` (torch,
JAX) or a PyOpenCL array (the cl_mem path)."""

# clvarlen dtype names, their C enum values, numpy dtypes and DLPack (code, bits).
DTYPES = {
    "f32": (lib.CLVARLEN_DTYPE_F32, np.dtype(np.float32), (2, 32)),
    "f16": (lib.CLVARLEN_DTYPE_F16, np.dtype(np.float16), (2, 16)),
    "bf16": (lib.CLVARLEN_DTYPE_BF16, np.dtype(np.uint16), (4, 16)),
    "f64": (lib.CLVARLEN_DTYPE_F64, np.dtype(np.float64), (2, 64)),
    "i32": (lib.CLVARLEN_DTYPE_I32, np.dtype(np.int32), (0, 32)),
    "i64": (lib.CLVARLEN_DTYPE_I64, np.dtype(np.int64), (0, 64)),
    "u8": (lib.CLVARLEN_DTYPE_U8, np.dtype(np.uint8), (1, 8)),
}
_NP_NAMES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16",
             np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
             np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8", np.dtype(np.bool_): "u8",
             np.dtype(np.uint16): "u16"}
_DL_NAMES = {v[2]: k for k, v in DTYPES.items()}
_DL_NAMES[(1, 16)] = "u16"
_DL_NAMES[(6, 8)] = "u8"
_DL_CPU = (1, 3)  # kDLCPU, kDLCUDAHost (pinned host memory)
_DL_DEVICES = {2: "CUDA", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm", 13: "CUDA managed",
               14: "oneAPI"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _contiguous_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


class View:
    """One argument: where it is, its shape, element strides and dtype name."""

    __slots__ = ("name", "obj", "kind", "addr", "mem", "offset", "shape", "strides", "dtype",
                 "itemsize", "readonly", "queue", "cl_context", "keep")

    def __init__(self, name, obj, kind, shape, strides, dtype, itemsize):
        self.name, self.obj, self.kind = name, obj, kind
        self.shape, self.strides = tuple(int(s) for s in shape), tuple(strides)
        self.dtype, self.itemsize = dtype, itemsize
        self.addr, self.mem, self.offset = 0, 0, 0
        self.readonly, self.queue, self.cl_context, self.keep = False, None, None, None

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def ptr(self, ctype="void *"):
        return ffi.cast(ctype, self.addr)


def _element_strides(name, byte_strides, itemsize):
    out = []
    for s in byte_strides:
        if s % itemsize:
            raise invalid("%s: a stride of %d bytes is not a whole number of elements"
                          % (name, s))
        out.append(s // itemsize)
    return tuple(out)


def _from_numpy(name, a):
    dtype = _NP_NAMES.get(a.dtype)
    if dtype is None:
        dtype = "raw%d" % a.dtype.itemsize
    v = View(name, a, "numpy", a.shape, _element_strides(name, a.strides, a.dtype.itemsize),
             dtype, a.dtype.itemsize)
    v.addr = a.__array_interface__["data"][0]
    v.readonly = not a.flags.writeable
    return v


def _from_dlpack(name, obj):
    dev = obj.__dlpack_device__()
    if int(dev[0]) not in _DL_CPU:
        raise unsupported("%s: a tensor on a %s device (DLPack device type %d); clvarlen takes "
                          "host memory, or PyOpenCL arrays through a Context made with "
                          "Context.from_pyopencl: it never copies a device tensor silently"
                          % (name, _DL_DEVICES.get(int(dev[0]), "non-CPU"), int(dev[0])))
    capsule = obj.__dlpack__()
    ptr = _capsule_pointer(capsule, b"dltensor")
    t = _DLTensor.from_address(ptr)
    key = (t.dtype.code, t.dtype.bits)
    if t.dtype.lanes != 1:
        raise unsupported("%s: vector dtypes (%d lanes) are not taken" % (name, t.dtype.lanes))
    itemsize = max(t.dtype.bits // 8, 1)
    dtype = _DL_NAMES.get(key, "raw%d" % itemsize)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        strides = _contiguous_strides(shape)
    v = View(name, obj, "dlpack", shape, strides, dtype, itemsize)
    v.addr = (t.data or 0) + t.byte_offset
    v.keep = capsule  # its destructor returns the tensor to its producer
    if type(obj).__module__.startswith("torch"):
        v.kind = "torch"
    return v


def _from_pyopencl(name, a):
    dtype = _NP_NAMES.get(a.dtype, "raw%d" % a.dtype.itemsize)
    v = View(name, a, "cl", a.shape, _element_strides(name, a.strides, a.dtype.itemsize),
             dtype, a.dtype.itemsize)
    v.mem = a.base_data.int_ptr if a.base_data is not None else 0
    v.offset = int(a.offset)
    v.queue = a.queue
    v.cl_context = a.context.int_ptr
    return v


def is_pyopencl(obj):
    return type(obj).__module__.startswith("pyopencl") and hasattr(obj, "base_data")


def view(name, obj, dtype=None):
    """A View of obj; dtype ("bf16", "f16") names what uint16 data holds."""
    if obj is None:
        return None
    if isinstance(obj, View):
        return obj
    if is_pyopencl(obj):
        v = _from_pyopencl(name, obj)
    elif isinstance(obj, np.ndarray):
        v = _from_numpy(name, obj)
    elif hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        v = _from_dlpack(name, obj)
    elif isinstance(obj, (list, tuple)):
        v = _from_numpy(name, np.ascontiguousarray(obj))
    else:
        raise invalid("%s: expected a numpy array, a DLPack tensor or a PyOpenCL array, got %s"
                      % (name, type(obj).__name__))
    if dtype is not None and v.dtype != dtype:
        if v.dtype != "u16" or dtype not in ("bf16", "f16"):
            raise invalid("%s: dtype=%r given, but the array holds %s" % (name, dtype, v.dtype))
        v.dtype = dtype
    return v


def need_dtype(v, allowed):
    if v.dtype not in allowed:
        shown = "uint16 (say dtype='bf16' for bf16 data)" if v.dtype == "u16" else v.dtype
        raise invalid("%s: dtype %s is not taken here (expected %s)"
                      % (v.name, shown, " or ".join(allowed)))


def need_shape(v, shape):
    """shape: ints or None (any) per dimension."""
    ok = v.ndim == len(shape) and all(s is None or s == d for s, d in zip(shape, v.shape))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise invalid("%s: shape %s, expected %s" % (v.name, list(v.shape), want))


def need_inner_contiguous(v, from_dim=1):
    """Dimensions from_dim.. packed (the C API takes a stride for dimension 0 only)."""
    if v.numel() == 0:
        return
    expect = 1
    for d in range(v.ndim - 1, from_dim - 1, -1):
        if v.shape[d] > 1 and v.strides[d] != expect:
            raise invalid("%s: dimensions %d.. must be contiguous (strides %s in elements); "
                          "only the first dimension may be strided" % (v.name, from_dim,
                                                                       list(v.strides)))
        expect *= v.shape[d]


def need_contiguous(v):
    need_inner_contiguous(v, 0)


def row_stride(v, row_elems):
    """The token stride in elements of a [rows, ...] view whose rows are packed."""
    need_inner_contiguous(v, 1)
    if v.ndim == 0:
        raise invalid("%s: a 0-d array" % v.name)
    if v.shape[0] <= 1 or v.numel() == 0:
        return row_elems
    if v.strides[0] < row_elems:
        raise invalid("%s: a row stride of %d elements, less than a row (%d); rows must not "
                      "overlap or run backwards" % (v.name, v.strides[0], row_elems))
    return v.strides[0]


def need_writable(v):
    if v.readonly:
        raise invalid("%s: the output array is read-only" % v.name)
