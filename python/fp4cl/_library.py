"""Finding and loading libfp4cl, and the ctypes declarations of the C API (include/fp4cl/fp4cl.h).

The shared library is looked up, in order:
  1. the environment variable FP4CL_LIBRARY (a path to libfp4cl.so: the build tree's in tests);
  2. the install prefix the package sits in: `cmake --install --prefix P` puts the library in
     P/<libdir> and this package in P/<libdir>/python3/site-packages/fp4cl, so each folder above the
     package (and its lib/, lib64/) is searched;
  3. the dynamic loader's search path (ldconfig, LD_LIBRARY_PATH) as "libfp4cl.so.0.1" (the
     SONAME of this C API version) / "libfp4cl.so".
Before 1.0 a minor release may change the ABI (the SONAME carries major.minor), so the library's
major.minor must be the binding's; from 1.0 on, the same major and a minor not below it.
"""

import ctypes
import os
import threading

# The C API version this binding was written against (FP4CL_VERSION_MAJOR / _MINOR of fp4cl.h).
API_MAJOR = 0
API_MINOR = 1
_SONAME = f"libfp4cl.so.{API_MAJOR}.{API_MINOR}"

_c_status = ctypes.c_int  # fp4cl_status (a C enum: int)


class LayerInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int32),
        ("weight_format", ctypes.c_int32),
        ("activations", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("out_features", ctypes.c_int64),
        ("in_features", ctypes.c_int64),
        ("num_experts", ctypes.c_int64),
        ("hidden", ctypes.c_int64),
        ("intermediate", ctypes.c_int64),
    ]


class LinearOptions(ctypes.Structure):
    _fields_ = [("max_tokens", ctypes.c_int64), ("output", ctypes.c_int32)]


class LinearInfo(ctypes.Structure):
    _fields_ = [
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("max_tokens", ctypes.c_int64),
        ("weight_format", ctypes.c_int32),
        ("activations", ctypes.c_int32),
        ("output", ctypes.c_int32),
    ]


class MoeOptions(ctypes.Structure):
    _fields_ = [
        ("max_tokens", ctypes.c_int64),
        ("output", ctypes.c_int32),
        ("top_k", ctypes.c_int32),
        ("renormalize", ctypes.c_int32),
        ("expert_map", ctypes.POINTER(ctypes.c_int32)),
        ("expert_map_size", ctypes.c_size_t),
        ("batch_invariant", ctypes.c_int32),
    ]


class MoeInfo(ctypes.Structure):
    _fields_ = [
        ("num_experts", ctypes.c_int64),
        ("num_local_experts", ctypes.c_int64),
        ("hidden", ctypes.c_int64),
        ("intermediate", ctypes.c_int64),
        ("max_tokens", ctypes.c_int64),
        ("top_k", ctypes.c_int32),
        ("weight_format", ctypes.c_int32),
        ("activations", ctypes.c_int32),
        ("output", ctypes.c_int32),
    ]


class MoeActivation(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("alpha", ctypes.c_float), ("limit", ctypes.c_float)]


class MoeRouting(ctypes.Structure):
    _fields_ = [
        ("logits", ctypes.c_int32),
        ("scoring", ctypes.c_int32),
        ("groups", ctypes.c_int32),
        ("top_groups", ctypes.c_int32),
        ("correction_bias", ctypes.c_int32),
        ("renormalize", ctypes.c_int32),
        ("scaling_factor", ctypes.c_float),
    ]


_p = ctypes.c_void_p  # opaque handles
_pp = ctypes.POINTER(ctypes.c_void_p)
_size = ctypes.c_size_t
_i64 = ctypes.c_int64

# name: (restype, argtypes)
_PROTOTYPES = {
    "fp4cl_version": (ctypes.c_uint32, []),
    "fp4cl_version_string": (ctypes.c_char_p, []),
    "fp4cl_last_error": (ctypes.c_char_p, []),
    "fp4cl_last_cl_status": (ctypes.c_int32, []),
    "fp4cl_status_name": (ctypes.c_char_p, [_c_status]),
    "fp4cl_context_create": (_c_status, [ctypes.c_char_p, _pp]),
    "fp4cl_context_release": (None, [_p]),
    "fp4cl_context_device_description": (ctypes.c_char_p, [_p]),
    "fp4cl_context_finish": (_c_status, [_p]),
    "fp4cl_model_open": (_c_status, [_p, ctypes.c_char_p, _pp]),
    "fp4cl_model_release": (None, [_p]),
    "fp4cl_model_layer_count": (_c_status, [_p, ctypes.POINTER(_size)]),
    "fp4cl_model_layer_info": (_c_status, [_p, _size, ctypes.POINTER(LayerInfo)]),
    "fp4cl_model_find_layer": (_c_status, [_p, ctypes.c_char_p, ctypes.POINTER(_size)]),
    "fp4cl_linear_options_init": (None, [ctypes.POINTER(LinearOptions)]),
    "fp4cl_model_get_linear": (_c_status, [_p, ctypes.c_char_p, ctypes.POINTER(LinearOptions), _pp]),
    "fp4cl_model_get_linear_at": (_c_status, [_p, _size, ctypes.POINTER(LinearOptions), _pp]),
    "fp4cl_linear_release": (None, [_p]),
    "fp4cl_linear_get_info": (_c_status, [_p, ctypes.POINTER(LinearInfo)]),
    "fp4cl_linear_run": (_c_status, [_p, _p, _size, _i64, _p, _size]),
    "fp4cl_linear_describe_kernel": (_c_status, [_p, _i64, ctypes.c_char_p, _size, ctypes.POINTER(_size)]),
    "fp4cl_moe_options_init": (None, [ctypes.POINTER(MoeOptions)]),
    "fp4cl_model_get_moe": (_c_status, [_p, ctypes.c_char_p, ctypes.POINTER(MoeOptions), _pp]),
    "fp4cl_model_get_mlp": (_c_status, [_p, ctypes.c_char_p, ctypes.POINTER(MoeOptions), _pp]),
    "fp4cl_model_get_moe_at": (_c_status, [_p, _size, ctypes.POINTER(MoeOptions), _pp]),
    "fp4cl_model_get_moe_with_activation": (_c_status, [_p, ctypes.c_char_p, ctypes.POINTER(MoeOptions),
                                                        ctypes.POINTER(MoeActivation), _pp]),
    "fp4cl_model_get_moe_at_with_activation": (_c_status, [_p, _size, ctypes.POINTER(MoeOptions),
                                                           ctypes.POINTER(MoeActivation), _pp]),
    "fp4cl_model_get_moe_with_shared_experts": (_c_status, [_p, ctypes.c_char_p, ctypes.POINTER(MoeOptions),
                                                            ctypes.POINTER(MoeActivation), _pp]),
    "fp4cl_model_get_moe_at_with_shared_experts": (_c_status, [_p, _size, ctypes.POINTER(MoeOptions),
                                                               ctypes.POINTER(MoeActivation), _pp]),
    "fp4cl_moe_release": (None, [_p]),
    "fp4cl_moe_get_shared_experts": (_c_status, [_p, ctypes.POINTER(ctypes.c_int32)]),
    "fp4cl_moe_get_info": (_c_status, [_p, ctypes.POINTER(MoeInfo)]),
    "fp4cl_moe_get_activation": (_c_status, [_p, ctypes.POINTER(MoeActivation)]),
    "fp4cl_moe_get_routing": (_c_status, [_p, ctypes.POINTER(MoeRouting)]),
    "fp4cl_moe_run": (_c_status, [_p, _p, _size, _p, _size, _p, _size, _i64, _p, _size]),
    "fp4cl_moe_describe_kernel": (_c_status, [_p, _i64, ctypes.c_char_p, _size, ctypes.POINTER(_size)]),
    "fp4cl_moe_run_logits": (_c_status, [_p, _p, _size, _p, _size, _i64, _p, _size]),
}

_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("FP4CL_LIBRARY")
    if env:
        return [env], True
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    # <libdir>/python3/site-packages/fp4cl → <libdir>; a copy elsewhere under a prefix → <prefix>/lib.
    probe = here
    for _ in range(5):
        probe = os.path.dirname(probe)
        for sub in ("", "lib", "lib64"):
            for name in (_SONAME, "libfp4cl.so"):
                path = os.path.join(probe, sub, name)
                if os.path.exists(path) and path not in found:
                    found.append(path)
    return found + [_SONAME, "libfp4cl.so"], False


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def library():
    """The loaded libfp4cl (ctypes.CDLL), loaded and checked on first use."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        from .errors import LibraryNotFoundError

        paths, from_env = _candidates()
        tried = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path}: {e}")
                if from_env:
                    break
                continue
            try:
                _declare(lib)
            except AttributeError as e:
                raise LibraryNotFoundError(
                    f"{path} is not a libfp4cl with the C API this binding needs ({e})") from None
            version = lib.fp4cl_version()
            major, minor = version // 10000, version // 100 % 100
            if major != API_MAJOR or (minor != API_MINOR if major == 0 else minor < API_MINOR):
                raise LibraryNotFoundError(
                    f"{path} is libfp4cl {lib.fp4cl_version_string().decode()}; this binding needs "
                    f"{API_MAJOR}.{API_MINOR}" + ("" if API_MAJOR == 0 else f" or a later {API_MAJOR}.x"))
            _lib = lib
            return lib
        hint = ("FP4CL_LIBRARY is set: it must name a loadable libfp4cl.so" if from_env else
                "set FP4CL_LIBRARY to the path of libfp4cl.so (build tree or install prefix) or install it")
        raise LibraryNotFoundError("cannot load libfp4cl: " + "; ".join(tried) + f". {hint}")
