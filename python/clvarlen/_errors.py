"""clvarlen's exceptions: one per status family, each carrying the C status."""
from ._clvarlen import ffi, lib

__all__ = ["Error", "InvalidArgumentError", "UnsupportedError", "OutOfMemoryError",
           "DeviceError"]


class Error(Exception):
    """A clvarlen call failed.

    ``status`` is the C status name (``"CLVARLEN_ERROR_INVALID_ARGUMENT"``),
    ``code`` its number and ``message`` the library's message (or the
    binding's, for arguments it rejects before calling the library). On any
    error nothing was written to the outputs, ``out=`` arrays included.
    """

    def __init__(self, status, message):
        self.code = int(status)
        self.status = ffi.string(lib.clvarlen_status_name(status)).decode()
        self.message = message
        super().__init__("%s: %s" % (self.status, message))


class InvalidArgumentError(Error, ValueError):
    """A bad argument: shape, stride, dtype mismatch, cu_seqlens, index, capacity, size."""


class UnsupportedError(Error):
    """A valid request this build or device does not take (dtype, head dim, no OpenCL)."""


class OutOfMemoryError(Error, MemoryError):
    """Host or device memory could not be had."""


class DeviceError(Error):
    """No such device, an OpenCL call failed, a kernel was not found or did not build."""


_FAMILY = {
    lib.CLVARLEN_ERROR_INVALID_ARGUMENT: InvalidArgumentError,
    lib.CLVARLEN_ERROR_INVALID_CU_SEQLENS: InvalidArgumentError,
    lib.CLVARLEN_ERROR_INDEX_OUT_OF_RANGE: InvalidArgumentError,
    lib.CLVARLEN_ERROR_BUFFER_TOO_SMALL: InvalidArgumentError,
    lib.CLVARLEN_ERROR_OVERFLOW: InvalidArgumentError,
    lib.CLVARLEN_ERROR_UNSUPPORTED: UnsupportedError,
    lib.CLVARLEN_ERROR_NO_OPENCL: UnsupportedError,
    lib.CLVARLEN_ERROR_OUT_OF_MEMORY: OutOfMemoryError,
    lib.CLVARLEN_ERROR_DEVICE_NOT_FOUND: DeviceError,
    lib.CLVARLEN_ERROR_OPENCL: DeviceError,
    lib.CLVARLEN_ERROR_KERNEL_NOT_FOUND: DeviceError,
    lib.CLVARLEN_ERROR_KERNEL_BUILD: DeviceError,
    lib.CLVARLEN_ERROR_INTERNAL: DeviceError,
}


def error_for(status, message):
    """The exception for a C status."""
    return _FAMILY.get(status, Error)(status, message)


def invalid(message):
    """An InvalidArgumentError raised by the binding itself (no C call made)."""
    return InvalidArgumentError(lib.CLVARLEN_ERROR_INVALID_ARGUMENT, message)


def unsupported(message):
    """An UnsupportedError raised by the binding itself."""
    return UnsupportedError(lib.CLVARLEN_ERROR_UNSUPPORTED, message)
