"""fp4cl: FP4 (NVFP4, MXFP4) linear and Mixture-of-Experts layers on OpenCL, from Python.

    import fp4cl, numpy as np, ml_dtypes
    with fp4cl.Model("/models/qwen3-moe-nvfp4") as model:        # a new context on FP4CL_DEVICE
        q = model.linear("model.layers.0.self_attn.q_proj")
        y = q.run(np.ones((4, q.k), ml_dtypes.bfloat16))          # [4, n] bfloat16
        moe = model.moe("model.layers.0")
        out = moe.run(x, topk_ids, topk_weights)                  # or moe.run_logits(x, logits)

A pure ctypes binding of the C API (include/fp4cl/fp4cl.h): it loads libfp4cl.so (FP4CL_LIBRARY,
the install prefix, or the loader's path; see _library.py). README.md, section "Python".
"""

from . import _library
from .context import Context
from .errors import (DeviceNotFoundError, Error, InternalError, InvalidArgumentError, InvalidExpertIdError,
                     InvalidModelError, LibraryNotFoundError, NotFoundError, OpenCLError, OutOfMemoryError, Status,
                     UnsupportedError)
from .linear import Linear
from .model import LayerInfo, Model
from .moe import Moe

__all__ = ["Context", "Model", "LayerInfo", "Linear", "Moe", "Error", "Status", "InvalidArgumentError",
           "NotFoundError", "InvalidModelError", "DeviceNotFoundError", "OpenCLError", "OutOfMemoryError",
           "InvalidExpertIdError", "UnsupportedError", "InternalError", "LibraryNotFoundError", "library_version",
           "library_path"]


def library_version():
    """The loaded library's version string ("0.1.0")."""
    return _library.library().fp4cl_version_string().decode()


def library_path():
    """The path libfp4cl was loaded from."""
    return _library.library()._name
