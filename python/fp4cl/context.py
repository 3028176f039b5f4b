"""fp4cl.Context: an OpenCL device with its context, in-order queue and compiled kernels."""

import ctypes

from . import _library
from .errors import check
from .handle import Handle


class Context(Handle):
    """Context(device=None)

    `device` selects the OpenCL device like fp4cl_context_create(): None → the environment
    variable FP4CL_DEVICE, else "default" (the first GPU, else PoCL's CPU); "gpu", "cpu",
    "accelerator"; "P:D" (platform P, device D, as `fp4cl devices` lists them); or a part of the
    device's name. fp4cl.DeviceNotFoundError (its message lists the devices) when none matches.
    """

    _release = "fp4cl_context_release"
    _kind = "context"

    def __init__(self, device=None):
        lib = _library.library()
        out = ctypes.c_void_p()
        selector = None if device is None else str(device).encode()
        check(lib, lib.fp4cl_context_create(selector, ctypes.byref(out)), "fp4cl_context_create")
        super().__init__(out)

    @property
    def device(self):
        """One line naming the device ("0:0 cpu-... (Portable Computing Language, CPU, ...)")."""
        return self._lib.fp4cl_context_device_description(self.handle).decode("utf-8", "replace")

    def finish(self):
        """Blocks until every command on the context's queue has completed."""
        self._check(self._lib.fp4cl_context_finish(self.handle), "fp4cl_context_finish")

    def open(self, directory):
        """The quantized model in `directory` (fp4cl.Model) on this context."""
        from .model import Model
        return Model(directory, context=self)

    def __repr__(self):
        return "<fp4cl.Context closed>" if self.closed else f"<fp4cl.Context {self.device}>"
