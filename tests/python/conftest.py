"""Fixtures of the python suite: the device under test (CLVARLEN_PY_DEVICE: "cpu" for the
CPU fallback, "pocl" for PoCL's OpenCL device), its PyOpenCL queue, and requirements."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import clvarlen  # noqa: E402  pylint: disable=wrong-import-position

DEVICE = os.environ.get("CLVARLEN_PY_DEVICE", "cpu")


def require(module):
    """Import an optional Debian package: a skip, or a failure when CI is set."""
    try:
        return __import__(module)
    except ImportError:
        msg = "python3-%s is not installed" % module.replace("pyopencl", "pyopencl")
        if os.environ.get("CI"):
            pytest.fail(msg + " (required when CI is set)")
        pytest.skip(msg)
        return None


@pytest.fixture(scope="session")
def ctx():
    try:
        c = clvarlen.Context(device=DEVICE, threads=2)
    except clvarlen.DeviceError as e:
        pytest.skip("no %s device: %s" % (DEVICE, e))
    yield c
    c.close()


@pytest.fixture(scope="session")
def clqueue():
    """A PyOpenCL queue on PoCL (only in the pocl run)."""
    if DEVICE == "cpu":
        pytest.skip("PyOpenCL arrays run in the pocl run")
    cl = require("pyopencl")
    for plat in cl.get_platforms():
        if "portable computing language" in plat.name.lower():
            dev = plat.get_devices()[0]
            return cl.CommandQueue(cl.Context([dev]))
    pytest.skip("no PoCL platform in PyOpenCL")
    return None


@pytest.fixture(scope="session")
def clctx(clqueue):
    c = clvarlen.Context.from_pyopencl(clqueue, threads=2)
    yield c
    c.close()


def batch(seed, n, total, extra=(0, 1)):
    """Sequence lengths from gen_seq_lens plus empty and length-1 sequences, shuffled."""
    lens = np.concatenate([clvarlen.gen_seq_lens(seed, 1, n, total)[0],
                           np.array(extra, np.int32)]).astype(np.int32)
    np.random.default_rng(seed).shuffle(lens)
    cu = np.zeros(len(lens) + 1, np.int32)
    cu[1:] = np.cumsum(lens)
    return lens, cu


def rand(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "bf16":
        from ref import f32_to_bf16  # pylint: disable=import-outside-toplevel
        return f32_to_bf16(x)
    return x.astype(np.float16 if dtype == "f16" else np.float32)
