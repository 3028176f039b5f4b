"""fp4cl.Model: a quantized model directory (ModelOpt or compressed-tensors, NVFP4/MXFP4) opened
on a context, its layers listed and created by name or index."""

import ctypes
import math
import operator
import os
from dataclasses import dataclass

import numpy as np

from . import _library
from .arrays import dtype_code
from .context import Context
from .errors import InvalidArgumentError
from .handle import Handle

_FORMATS = {0: "nvfp4", 1: "mxfp4"}


def scheme_name(weight_format, activations):
    """"nvfp4" (W4A4), "nvfp4a16", "mxfp4" or "mxfp4a16": the names `fp4cl quantize` takes."""
    return _FORMATS.get(weight_format, f"format{weight_format}") + ("a16" if activations == 1 else "")


@dataclass(frozen=True)
class LayerInfo:
    """One quantized layer of a model (fp4cl_layer_info)."""
    index: int
    name: str  # "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.experts"
    kind: str  # "linear" or "moe"
    scheme: str  # "nvfp4", "nvfp4a16", "mxfp4", "mxfp4a16"
    top_k: int  # MoE: config.json's num_experts_per_tok (0: not said)
    out_features: int  # linear N
    in_features: int  # linear K
    num_experts: int  # MoE E
    hidden: int  # MoE H
    intermediate: int  # MoE I


class Model(Handle):
    """Model(directory, context=None, device=None)

    Opens `directory` on `context` (an fp4cl.Context), or on a new context on `device` (see
    fp4cl.Context) that the model owns. Reads the configuration and tensor headers; weights are
    read when a layer is created. fp4cl.InvalidModelError (naming the file and what was expected)
    when the directory is not a model fp4cl can read.
    """

    _release = "fp4cl_model_release"
    _kind = "model"

    def __init__(self, directory, context=None, device=None):
        lib = _library.library()
        if context is not None and device is not None:
            raise InvalidArgumentError("fp4cl.Model: pass either context or device, not both")
        if context is not None and not isinstance(context, Context):
            raise InvalidArgumentError(
                f"fp4cl.Model: context is a {type(context).__name__}; expected an fp4cl.Context")
        self._own_context = context is None
        self.context = Context(device) if context is None else context
        self.directory = os.fspath(directory)
        out = ctypes.c_void_p()
        try:
            self._lib = lib
            self._check(lib.fp4cl_model_open(self.context.handle, os.fsencode(self.directory), ctypes.byref(out)),
                        "fp4cl_model_open")
        except BaseException:
            if self._own_context:
                self.context.close()
            raise
        super().__init__(out)

    def close(self):
        """Releases the model (layers made from it stay usable) and the context it made itself."""
        super().close()
        context = getattr(self, "context", None)
        if getattr(self, "_own_context", False) and context is not None:
            context.close()

    @property
    def layers(self):
        """Every quantized layer, in model order (linear modules and one entry per MoE layer)."""
        count = ctypes.c_size_t()
        self._check(self._lib.fp4cl_model_layer_count(self.handle, ctypes.byref(count)), "fp4cl_model_layer_count")
        return [self._info(i) for i in range(count.value)]

    def layer(self, name):
        """The LayerInfo of `name`: a linear module, an MoE layer's name, or its decoder-layer
        prefix ("model.layers.3"). fp4cl.NotFoundError when there is none."""
        index = ctypes.c_size_t()
        self._check(self._lib.fp4cl_model_find_layer(self.handle, _name(name), ctypes.byref(index)),
                    "fp4cl_model_find_layer")
        return self._info(index.value)

    def _info(self, index):
        info = _library.LayerInfo()
        self._check(self._lib.fp4cl_model_layer_info(self.handle, index, ctypes.byref(info)),
                    "fp4cl_model_layer_info")
        return LayerInfo(index, info.name.decode(), "moe" if info.kind == 1 else "linear",
                         scheme_name(info.weight_format, info.activations), info.top_k, info.out_features,
                         info.in_features, info.num_experts, info.hidden, info.intermediate)

    def linear(self, layer, max_tokens=512, output="bf16"):
        """The linear layer `layer` (its name or index) prepared on the device: an fp4cl.Linear.
        `max_tokens` is the largest batch one call may pass; `output` "bf16" or "fp32"."""
        from .linear import Linear
        options = _library.LinearOptions()
        self._lib.fp4cl_linear_options_init(ctypes.byref(options))
        options.max_tokens = _positive(max_tokens, "max_tokens", "Model.linear")
        options.output = dtype_code(output, "Model.linear")
        out = ctypes.c_void_p()
        if isinstance(layer, str):
            status = self._lib.fp4cl_model_get_linear(self.handle, _name(layer), ctypes.byref(options),
                                                      ctypes.byref(out))
        else:
            status = self._lib.fp4cl_model_get_linear_at(self.handle, _index(layer, "Model.linear"),
                                                         ctypes.byref(options), ctypes.byref(out))
        self._check(status, "fp4cl_model_get_linear")
        return Linear(out, self)

    def moe(self, layer, max_tokens=256, output="bf16", top_k=None, renormalize=None, expert_map=None,
            batch_invariant=False, activation=None, swiglu_alpha=None, swiglu_limit=None, shared_experts=False):
        """The MoE layer `layer` (its name, decoder-layer prefix or index) with its experts stacked
        and prepared on the device: an fp4cl.Moe.
          max_tokens   workspace capacity; larger batches run in chunks
          output       "bf16" or "fp32"
          top_k        k; None: config.json's num_experts_per_tok
          renormalize  router-logit path: divide the k weights by their sum; None: config.json
          expert_map   expert parallelism: [E_global] local expert id or -1 per global id
          batch_invariant  True: a token's output bits depend neither on max_tokens (chunking) nor
                       on the other tokens of a call run with the same strategy (at some speed)
          activation   FC1's activation instead of config.json's: "swiglu", or gpt-oss's
                       "swiglu_clamped" with swiglu_alpha (default 1.702) and swiglu_limit
                       (default 7); None: what config.json says
          shared_experts  True: the layer's shared expert ("<p>.shared_experts": DeepSeek, Kimi-K2,
                       GLM-4.5) fused, every token through it with weight 1 after its top_k
                       routed experts, in the same sum (Moe.shared_experts: how many experts of
                       the routed size it runs as); ids, weights and logits stay the routed ones'"""
        from .moe import Moe
        options = _library.MoeOptions()
        self._lib.fp4cl_moe_options_init(ctypes.byref(options))
        options.max_tokens = _positive(max_tokens, "max_tokens", "Model.moe")
        options.output = dtype_code(output, "Model.moe")
        if top_k is not None:
            options.top_k = _positive(top_k, "top_k", "Model.moe")
        if renormalize is not None:
            options.renormalize = 1 if renormalize else 0
        options.batch_invariant = 1 if batch_invariant else 0
        keep = None
        if expert_map is not None:
            keep = np.asarray(expert_map)
            if keep.ndim != 1 or keep.dtype.kind not in "iu" or keep.size == 0:
                raise InvalidArgumentError(
                    f"Model.moe: expert_map has dtype {keep.dtype} and shape {keep.shape}; expected a non-empty "
                    f"1-D integer array [E_global] of local expert ids or -1")
            keep = np.ascontiguousarray(keep, dtype=np.int32)
            options.expert_map = keep.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            options.expert_map_size = keep.size
        act = _activation(activation, swiglu_alpha, swiglu_limit)
        act_ref = ctypes.byref(act) if act is not None else None
        out = ctypes.c_void_p()
        form = "shared_experts" if shared_experts else "activation"
        if isinstance(layer, str):
            status = getattr(self._lib, f"fp4cl_model_get_moe_with_{form}")(
                self.handle, _name(layer), ctypes.byref(options), act_ref, ctypes.byref(out))
        else:
            status = getattr(self._lib, f"fp4cl_model_get_moe_at_with_{form}")(
                self.handle, _index(layer, "Model.moe"), ctypes.byref(options), act_ref, ctypes.byref(out))
        self._check(status, "fp4cl_model_get_moe")
        return Moe(out, self)

    def mlp(self, prefix, max_tokens=256, output="bf16", batch_invariant=False):
        """The gated MLP whose projections are "<prefix>.gate_proj", ".up_proj" and ".down_proj" (an
        MoE layer's shared expert, "model.layers.3.mlp.shared_experts", or a dense layer's MLP) as
        an fp4cl.Moe of one expert with top_k 1: run it with every id 0 and every weight 1
        (Moe.run); it has no router."""
        from .moe import Moe
        options = _library.MoeOptions()
        self._lib.fp4cl_moe_options_init(ctypes.byref(options))
        options.max_tokens = _positive(max_tokens, "max_tokens", "Model.mlp")
        options.output = dtype_code(output, "Model.mlp")
        options.batch_invariant = 1 if batch_invariant else 0
        out = ctypes.c_void_p()
        self._check(self._lib.fp4cl_model_get_mlp(self.handle, _name(prefix), ctypes.byref(options), ctypes.byref(out)),
                    "fp4cl_model_get_mlp")
        return Moe(out, self)

    def __repr__(self):
        return f"<fp4cl.Model {self.directory!r}{' closed' if self.closed else ''}>"


def _activation(activation, alpha, limit):
    """Model.moe's activation arguments as an fp4cl_moe_activation, or None for config.json's."""
    if activation is None:
        if alpha is not None or limit is not None:
            raise InvalidArgumentError("Model.moe: swiglu_alpha and swiglu_limit need activation=\"swiglu_clamped\"")
        return None
    if activation == "swiglu":
        if alpha is not None or limit is not None:
            raise InvalidArgumentError("Model.moe: activation \"swiglu\" takes no swiglu_alpha or swiglu_limit "
                                       "(those are \"swiglu_clamped\"'s)")
        return _library.MoeActivation(0, 0.0, 0.0)
    if activation == "swiglu_clamped":
        values = []
        for name, value, default in (("swiglu_alpha", alpha, 1.702), ("swiglu_limit", limit, 7.0)):
            try:
                number = default if value is None else float(value)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"Model.moe: {name} {value!r}; expected a number") from None
            if not (math.isfinite(number) and number > 0):
                raise InvalidArgumentError(f"Model.moe: {name} {value!r}; expected a finite number above 0")
            values.append(number)
        return _library.MoeActivation(1, *values)
    raise InvalidArgumentError(f"Model.moe: activation {activation!r}; expected None, \"swiglu\" or \"swiglu_clamped\"")


def _name(name):
    if not isinstance(name, str):
        raise InvalidArgumentError(f"layer name {name!r}: expected a str")
    return name.encode()


def _int(value):
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _index(index, what):
    i = _int(index)
    if i is None or i < 0:
        raise InvalidArgumentError(f"{what}: layer {index!r}; expected a layer name (str) or a non-negative index")
    return i


def _positive(value, name, what):
    v = _int(value)
    if v is None or v <= 0:
        raise InvalidArgumentError(f"{what}: {name} = {value!r}; expected a positive int")
    return v
