"""fp4cl.Linear: one quantized linear module, y = x · Wᵀ, run on NumPy arrays."""

import ctypes

from . import _library
from .arrays import OUTPUT_NUMPY, bf16_input, output, pointer
from .errors import InvalidArgumentError
from .handle import Handle
from .model import scheme_name


class Linear(Handle):
    """Created by Model.linear(). Attributes: n (out_features), k (in_features), max_tokens,
    scheme ("nvfp4", "nvfp4a16", "mxfp4", "mxfp4a16"), output_dtype (numpy dtype of y)."""

    _release = "fp4cl_linear_release"
    _kind = "linear layer"

    def __init__(self, handle, model):
        super().__init__(handle)
        self.model_directory = model.directory
        info = _library.LinearInfo()
        self._check(self._lib.fp4cl_linear_get_info(handle, ctypes.byref(info)), "fp4cl_linear_get_info")
        self.n, self.k, self.max_tokens = info.n, info.k, info.max_tokens
        self.scheme = scheme_name(info.weight_format, info.activations)
        self.output_dtype = OUTPUT_NUMPY[info.output]

    def __call__(self, x, out=None):
        return self.run(x, out)

    def run(self, x, out=None):
        """y = x · Wᵀ for x [m, k] (BF16 as ml_dtypes.bfloat16 or uint16 bits; float32 is rounded
        to BF16, nearest-even; a 1-D x is one row). Returns y [m, n] (1-D for a 1-D x) of the
        layer's output dtype, or writes `out`. Synchronous; m <= max_tokens."""
        one_row = getattr(x, "ndim", None) == 1
        bits = bf16_input(x, "x", (None, self.k), "Linear.run")
        m = bits.shape[0]
        if m > self.max_tokens:
            raise InvalidArgumentError(
                f"Linear.run: x has {m} rows; this layer was created with max_tokens = {self.max_tokens} "
                f"(Model.linear(..., max_tokens=...))")
        shape = (self.n,) if one_row else (m, self.n)
        y = output(out, self.output_dtype, shape, "Linear.run")
        self._check(self._lib.fp4cl_linear_run(self.handle, pointer(bits), bits.nbytes, m, pointer(y), y.nbytes),
                    "fp4cl_linear_run")
        return y

    def kernel_description(self, m):
        """The kernel that runs m rows (m >= 1), its parameters and where they come from (built-in
        defaults, a tuning database file and bucket, or an environment variable): one line."""
        return self._text("fp4cl_linear_describe_kernel", int(m))

    def __repr__(self):
        return f"<fp4cl.Linear {self.scheme} n={self.n} k={self.k}{' closed' if self.closed else ''}>"
