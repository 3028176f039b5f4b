"""fp4cl.Moe: the routed experts of one MoE layer, run on NumPy arrays.

    out[t] = Σ_s topk_weights[t, s] · Expert_{topk_ids[t, s]}(x[t])      (s = 0 .. k-1, in order)
    Expert_e(x) = FC2_e(bf16(silu(x · gate_eᵀ) · (x · up_eᵀ)))

with the experts' biases where the checkpoint has them, and gpt-oss's clamped SwiGLU where
config.json says so (model_type "gpt_oss" or a swiglu_limit; Moe.activation tells).
"""

import ctypes

import numpy as np

from . import _library
from .arrays import OUTPUT_NUMPY, bf16_input, float32_input, int32_input, output, pointer
from .handle import Handle
from .model import scheme_name


class Moe(Handle):
    """Created by Model.moe(). Attributes: num_experts (E_global, the range of valid ids),
    num_local_experts, hidden (H), intermediate (I), top_k (k), max_tokens, scheme, output_dtype,
    activation ("swiglu" or gpt-oss's "swiglu_clamped") with swiglu_alpha and swiglu_limit (the
    clamped form's; None for "swiglu"), routing (how run_logits routes, from config.json and the
    checkpoint: {"logits": False where it cannot, "scoring": "softmax" or "sigmoid", "groups",
    "top_groups", "correction_bias", "renormalize", "scaling_factor"}), shared_experts (the fused
    shared expert's experts of the routed size, Model.moe(shared_experts=True); 0 for none)."""

    _release = "fp4cl_moe_release"
    _kind = "MoE layer"

    def __init__(self, handle, model):
        super().__init__(handle)
        self.model_directory = model.directory
        info = _library.MoeInfo()
        self._check(self._lib.fp4cl_moe_get_info(handle, ctypes.byref(info)), "fp4cl_moe_get_info")
        self.num_experts, self.num_local_experts = info.num_experts, info.num_local_experts
        self.hidden, self.intermediate = info.hidden, info.intermediate
        self.max_tokens, self.top_k = info.max_tokens, info.top_k
        self.scheme = scheme_name(info.weight_format, info.activations)
        self.output_dtype = OUTPUT_NUMPY[info.output]
        act = _library.MoeActivation()
        self._check(self._lib.fp4cl_moe_get_activation(handle, ctypes.byref(act)), "fp4cl_moe_get_activation")
        clamped = act.kind == 1  # FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED
        self.activation = "swiglu_clamped" if clamped else "swiglu"
        self.swiglu_alpha = act.alpha if clamped else None
        self.swiglu_limit = act.limit if clamped else None
        r = _library.MoeRouting()
        self._check(self._lib.fp4cl_moe_get_routing(handle, ctypes.byref(r)), "fp4cl_moe_get_routing")
        self.routing = {"logits": bool(r.logits), "scoring": "sigmoid" if r.scoring == 1 else "softmax",
                        "groups": r.groups, "top_groups": r.top_groups, "correction_bias": bool(r.correction_bias),
                        "renormalize": bool(r.renormalize), "scaling_factor": r.scaling_factor}
        shared = ctypes.c_int32()
        self._check(self._lib.fp4cl_moe_get_shared_experts(handle, ctypes.byref(shared)),
                    "fp4cl_moe_get_shared_experts")
        self.shared_experts = shared.value

    def kernel_description(self, tokens):
        """The strategy that runs a call of `tokens` tokens (>= 1), its tiles and where they come
        from: "mma: tile_m 32, local sizes 32 and 32, ... [tuned bucket 512 (FILE)]"."""
        return self._text("fp4cl_moe_describe_kernel", int(tokens))

    def run(self, x, topk_ids, topk_weights, out=None):
        """Precomputed routing: x [T, H] (BF16 as ml_dtypes.bfloat16 or uint16; float32 rounded to
        BF16), topk_ids [T, k] (integers, converted to int32), topk_weights [T, k] (float32).
        Returns out [T, H] of the layer's output dtype (or writes `out`). One token may come as
        1-D x [H], topk_ids [k], topk_weights [k]: out is then [H]. An id outside
        [0, num_experts) raises fp4cl.InvalidExpertIdError naming it (nothing runs)."""
        one = getattr(x, "ndim", None) == 1
        bits = bf16_input(x, "x", (None, self.hidden), "Moe.run")
        t = bits.shape[0]
        if one:
            topk_ids, topk_weights = np.reshape(topk_ids, (1, -1)), np.reshape(topk_weights, (1, -1))
        ids = int32_input(topk_ids, "topk_ids", (t, self.top_k), "Moe.run")
        weights = float32_input(topk_weights, "topk_weights", (t, self.top_k), "Moe.run")
        y = output(out, self.output_dtype, (self.hidden,) if one else (t, self.hidden), "Moe.run")
        self._check(self._lib.fp4cl_moe_run(self.handle, pointer(bits), bits.nbytes, pointer(ids), ids.nbytes,
                                            pointer(weights), weights.nbytes, t, pointer(y), y.nbytes),
                    "fp4cl_moe_run")
        return y

    def run_logits(self, x, router_logits, out=None):
        """Routing on the device: router_logits [T, num_experts] float32 (softmax over all experts,
        top-k with ties to the lower id, renormalized as the layer was created). 1-D x [H] with
        router_logits [num_experts] is one token (out [H])."""
        one = getattr(x, "ndim", None) == 1
        bits = bf16_input(x, "x", (None, self.hidden), "Moe.run_logits")
        t = bits.shape[0]
        if one:
            router_logits = np.reshape(router_logits, (1, -1))
        logits = float32_input(router_logits, "router_logits", (t, self.num_experts), "Moe.run_logits")
        y = output(out, self.output_dtype, (self.hidden,) if one else (t, self.hidden), "Moe.run_logits")
        self._check(self._lib.fp4cl_moe_run_logits(self.handle, pointer(bits), bits.nbytes, pointer(logits),
                                                   logits.nbytes, t, pointer(y), y.nbytes),
                    "fp4cl_moe_run_logits")
        return y

    def __repr__(self):
        return (f"<fp4cl.Moe {self.scheme} E={self.num_experts} H={self.hidden} I={self.intermediate} "
                f"k={self.top_k}{' closed' if self.closed else ''}>")
