"""Devices: what clvarlen-test list prints."""
import collections

from ._clvarlen import ffi, lib
from ._errors import error_for

DeviceInfo = collections.namedtuple(
    "DeviceInfo", "index kind vendor name platform platform_vendor driver opencl_c "
                  "compute_units max_clock_mhz global_mem_bytes local_mem_bytes "
                  "max_work_group_size has_fp16 has_fp64 cc")
DeviceInfo.__doc__ = """One device. index -1 is the CPU fallback; kind is "cpu-fallback",
"discrete-gpu", "integrated-gpu", "opencl-cpu" or "accelerator"; vendor "nvidia", "amd",
"intel", "cpu" or "other"; cc the NVIDIA compute capability (major, minor) or (0, 0)."""

_KINDS = {0: "cpu-fallback", 1: "discrete-gpu", 2: "integrated-gpu", 3: "opencl-cpu",
          4: "accelerator"}
_VENDORS = {0: "other", 1: "nvidia", 2: "amd", 3: "intel", 4: "cpu"}


def _s(chars):
    return ffi.string(chars).decode("utf-8", "replace")


def device_info(i):
    return DeviceInfo(i.index, _KINDS.get(i.kind, "other"), _VENDORS.get(i.vendor, "other"),
                      _s(i.device_name), _s(i.platform_name), _s(i.platform_vendor),
                      _s(i.driver_version), _s(i.opencl_c_version), i.compute_units,
                      i.max_clock_mhz, i.global_mem_bytes, i.local_mem_bytes,
                      i.max_work_group_size, bool(i.has_fp16), bool(i.has_fp64),
                      (i.cc_major, i.cc_minor))


def _check(status):
    if status != lib.CLVARLEN_SUCCESS:
        raise error_for(status, ffi.string(lib.clvarlen_last_error(ffi.NULL)).decode())


def devices():
    """The OpenCL devices clvarlen sees (the list `clvarlen-test list` prints), then the
    CPU fallback (index -1)."""
    count = ffi.new("size_t *")
    _check(lib.clvarlen_device_count(count))
    out = []
    for index in list(range(count[0])) + [-1]:
        info = ffi.new("clvarlen_device_info *")
        _check(lib.clvarlen_device_query_sized(index, info, ffi.sizeof("clvarlen_device_info")))
        out.append(device_info(info))
    return out


def select_device(spec=None):
    """(index, reason): the device a Context(device=spec) would use (-1: CPU fallback)."""
    index = ffi.new("int *")
    reason = ffi.new("char[512]")
    _check(lib.clvarlen_device_select(ffi.NULL if spec is None else str(spec).encode(), index,
                                      reason, 512))
    return index[0], _s(reason)
