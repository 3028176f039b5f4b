"""The life cycle every fp4cl object shares: an owned C handle, released once by close(), by
leaving a `with` block, or when the object is garbage-collected.

The C library keeps what a handle needs alive by itself (a model or layer retains its context),
so objects may be closed in any order. Using a closed object raises fp4cl.InvalidArgumentError.
"""

import ctypes

from . import _library
from .errors import InvalidArgumentError, check


class Handle:
    _release = None  # name of the fp4cl_*_release function
    _kind = "object"

    def __init__(self, handle):
        self._lib = _library.library()
        self._handle = handle

    @property
    def handle(self):
        """The C handle (a ctypes.c_void_p), for calls this binding does not wrap."""
        if self._handle is None:
            raise InvalidArgumentError(f"this fp4cl {self._kind} is closed")
        return self._handle

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Releases the C handle now (idempotent)."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            getattr(self._lib, self._release)(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def _check(self, status, what):
        check(self._lib, status, what)

    def _text(self, function, count):
        """The text a fp4cl_*_describe_* function gives for `count` (its length asked first)."""
        fn = getattr(self._lib, function)
        length = ctypes.c_size_t(0)
        self._check(fn(self.handle, count, None, 0, ctypes.byref(length)), function)
        text = ctypes.create_string_buffer(length.value + 1)
        self._check(fn(self.handle, count, text, len(text), None), function)
        return text.value.decode()
