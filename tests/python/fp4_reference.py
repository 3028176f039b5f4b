"""An independent NumPy reference of fp4cl's linear and MoE layers, written from the spec
(/work/shared/spec/FP4.md, README "Python") and not from the library's code: checkpoints are read
with the official `safetensors` package, FP4/FP8/E8M0 values are decoded and encoded by
`ml_dtypes` (float4_e2m1fn, float8_e4m3fn, float8_e8m0fnu), arithmetic is float64.

Rounding points it models (FP4.md §3, §4, §6):
  - W4A4 activation quantization per block (NVFP4 recipe with IEEE fp32 steps; MXFP4 "ceil" rule),
    reproduced bit for bit in float32 NumPy arithmetic;
  - the linear epilogue alpha = fp32(input gs_d × weight gs_d), one fp32 product;
  - W4A16 linear: a conforming implementation may multiply each activation on its 16-element
    chunk's integer grid (README "Numerics": the CPUs' integer GEMV); the bound adds that deviation;
  - MoE: FC1 (gate, up with their own global scales) → SwiGLU → BF16 rounding → (W4A4: per-block
    re-quantization with global scale 1) → FC2 → top-k weighted sum in slot order.

Every result comes with a rigorous bound on how far a conforming fp32 implementation may land:
dot products of n exact terms summed in any order (γ(n+4)·Σ|terms|, γ(n) = n·u/(1 - n·u),
u = 2^-24), silu in fp32 (16 u + the propagated error of its input), and where the BF16 rounding of
a SwiGLU output may go either way, both roundings are carried on (W4A4: every block scale those
roundings can lead to, and every element's quantization under each). `accepts()` checks a device
output against value ± bound.
"""

import glob
import json
import os
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
from safetensors import deserialize

U = 2.0**-24  # unit roundoff of fp32
TINY = 2.0**-120  # absolute slack for results far below the normal range

_DTYPES = {
    "U8": np.uint8,
    "I8": np.int8,
    "I32": np.int32,
    "I64": np.int64,
    "F16": np.float16,
    "F32": np.float32,
    "F64": np.float64,
    "BF16": ml_dtypes.bfloat16,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
}


def gamma(n):
    return n * U / (1.0 - n * U)


# ---------------------------------------------------------------------------------------------
# Element and scale formats (FP4.md §1), through ml_dtypes.


def e2m1_decode(codes):
    """float64 values of 4-bit codes (0x8 is negative zero, decoded as 0)."""
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes & 0xF).view(ml_dtypes.float4_e2m1fn).astype(np.float64) + 0.0


def e2m1_encode(values):
    """4-bit codes of float32 values: RNE, saturating at ±6; the sign bit is the input's."""
    v = np.asarray(values, dtype=np.float32)
    mag = np.minimum(np.abs(v), np.float32(6.0)).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0x7
    sign = np.where(np.signbit(v), np.uint8(8), np.uint8(0))
    return (mag | sign).astype(np.uint8)


def e4m3_decode(bytes_):
    return np.asarray(bytes_, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def e4m3_encode(values):
    """E4M3 bytes of non-negative float32 values: clamp to [0, 448], then RNE (FP4.md §1)."""
    v = np.clip(np.asarray(values, dtype=np.float32), np.float32(0), np.float32(448))
    return v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def e8m0_decode(bytes_):
    return np.asarray(bytes_, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)


def unpack_fp4(packed, k):
    """uint8 [..., k/2] → codes [..., k]: element 2i in the low nibble, 2i+1 in the high."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.empty(packed.shape[:-1] + (k,), dtype=np.uint8)
    codes[..., 0::2] = packed & 0xF
    codes[..., 1::2] = packed >> 4
    return codes


def pack_fp4(codes):
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def bf16_bits_to_float64(bits):
    return np.asarray(bits, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)


def round_to_bf16(v):
    """Round-to-nearest-even of float64 values to BF16 (one rounding, no detour through fp32)."""
    v = np.asarray(v, dtype=np.float64)
    _, ex = np.frexp(v)  # v = m·2^ex, |m| in [0.5, 1): ulp of an 8-bit significand is 2^(ex-8)
    ulp = np.ldexp(1.0, np.maximum(ex - 8, -133))  # BF16 subnormals: ulp 2^-133
    return np.round(v / ulp) * ulp  # np.round: half to even; v/ulp and the product are exact


# ---------------------------------------------------------------------------------------------
# Activation quantization (W4A4), bit-exact in float32 (FP4.md §3, §4).

ONE_SIXTH = np.float32(1.0 / 6.0)


def nvfp4_scale_byte(amax, gs):
    """Step 2 of the NVFP4 recipe: the E4M3 byte of gs × (amax × fp32(1/6)), all in fp32."""
    return e4m3_encode(np.float32(gs) * (np.asarray(amax, dtype=np.float32) * ONE_SIXTH))


def mxfp4_scale_byte(amax):
    """E = ceil(log2(amax / 6)) + 127 exactly, clamped to [0, 254]; 0 for an all-zero block."""
    amax = np.asarray(amax, dtype=np.float32)
    mant, ex = np.frexp(amax)  # amax = mant·2^ex, mant in [0.5, 1) → f = 2·mant in [1, 2)
    # 6·2^e >= amax ⇔ 1.5·2^(e+2) >= f·2^(ex-1): e = ex - 3 when f <= 1.5, else ex - 2.
    e = np.where(2 * mant <= 1.5, ex - 3, ex - 2)
    e = np.clip(e, -127, 127)
    e = np.where(np.isinf(amax), 127, e)
    return np.where(amax > 0, e + 127, 0).astype(np.uint8)


def scale_byte(amax, fmt, gs):
    return nvfp4_scale_byte(amax, gs) if fmt == "nvfp4" else mxfp4_scale_byte(amax)


def quantize_with_scale(x, sb, fmt, gs):
    """Codes of float32 values x [..., block] whose block has scale byte sb [...] (steps 3-4)."""
    x = np.asarray(x, dtype=np.float32)
    sb = np.asarray(sb, dtype=np.uint8)
    if fmt == "nvfp4":
        gs = np.float32(gs)
        sff = e4m3_decode(sb).astype(np.float32)
        with np.errstate(divide="ignore"):
            mult = np.where(sff == 0, np.float32(0), np.float32(1) / (sff * (np.float32(1) / gs))).astype(np.float32)
        return e2m1_encode(np.clip(x * mult[..., None], np.float32(-6), np.float32(6)))
    mult = np.ldexp(np.float32(1), 127 - sb.astype(np.int32)).astype(np.float32)  # 2^-(E-127), exact
    return e2m1_encode(x * mult[..., None])


def scale_value(sb, fmt):
    return e4m3_decode(sb) if fmt == "nvfp4" else e8m0_decode(sb)


def quantize_blocks(x, fmt, gs):
    """Rows of BF16-valued float32 x [m, k] with the recipe. Returns (codes [m, k], scale bytes
    [m, k/block]); gs (quant direction) is used by NVFP4 only."""
    x = np.asarray(x, dtype=np.float32)
    block = 16 if fmt == "nvfp4" else 32
    m, k = x.shape
    blocks = x.reshape(m, k // block, block)
    sb = scale_byte(np.max(np.abs(blocks), axis=2), fmt, gs)
    return quantize_with_scale(blocks, sb, fmt, gs).reshape(m, k), sb


def quantize_nvfp4(x, gs):
    return quantize_blocks(x, "nvfp4", gs)


def quantize_mxfp4(x):
    return quantize_blocks(x, "mxfp4", 1.0)


def quantized_activations(x, fmt, gs):
    """float64 [m, k]: the activation values a W4A4 layer multiplies (e2m1 × block scale, without
    the global scale)."""
    codes, sb = quantize_blocks(x, fmt, gs)
    block = 16 if fmt == "nvfp4" else 32
    return e2m1_decode(codes) * np.repeat(scale_value(sb, fmt), block, axis=1)


# ---------------------------------------------------------------------------------------------
# Checkpoints (FP4.md §5), read with the safetensors package.


def read_tensors(directory):
    tensors = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        with open(path, "rb") as f:
            for name, t in deserialize(f.read()):
                arr = np.frombuffer(bytes(t["data"]), dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])
                tensors[name] = arr
    return tensors


@dataclass
class Weight:
    """One quantized linear module: W [n, k] = e2m1 × block scale × gs_d."""
    fmt: str  # "nvfp4" | "mxfp4"
    w4a4: bool
    codes: np.ndarray  # [n, k] uint8
    block_scale: np.ndarray  # [n, k/block] float64
    gs_d: np.float32 = np.float32(1)  # the weight's dequant-direction global scale
    in_gs_q: np.float32 = np.float32(1)  # the activations' quant-direction global scale (NVFP4 W4A4)
    in_gs_d: np.float32 = np.float32(1)  # and its dequant direction

    @property
    def block(self):
        return 16 if self.fmt == "nvfp4" else 32

    def block_scaled(self):
        """float64 [n, k]: e2m1 × block scale, without the global scale (exact)."""
        return e2m1_decode(self.codes) * np.repeat(self.block_scale, self.block, axis=1)

    def dequantized(self):
        return self.block_scaled() * float(self.gs_d)


def _scale_pair(value, stored):
    """(gs_q, gs_d) from a stored fp32 scalar: the stored one exact, the other its fp32 reciprocal."""
    v = np.float32(np.asarray(value, dtype=np.float32).reshape(-1)[0])
    inverse = np.float32(1) / v
    return (inverse, v) if stored == "dequant" else (v, inverse)


class Checkpoint:
    """A quantized model directory as its producer wrote it: the scheme from config.json /
    hf_quant_config.json, the tensors by name."""

    def __init__(self, directory):
        self.directory = directory
        with open(os.path.join(directory, "config.json")) as f:
            self.config = json.load(f)
        q = self.config.get("quantization_config")
        hf = os.path.join(directory, "hf_quant_config.json")
        if q is None and os.path.exists(hf):
            with open(hf) as f:
                q = json.load(f)["quantization"]
                q["quant_method"] = "modelopt"
        if q is None:
            raise ValueError(f"{directory}: no quantization config")
        if q["quant_method"] == "modelopt":
            self.layout = "modelopt"
            self.fmt, self.w4a4 = "nvfp4", q["quant_algo"] == "NVFP4"
            if q["quant_algo"] not in ("NVFP4", "W4A16_NVFP4"):
                raise ValueError(f"unsupported quant_algo {q['quant_algo']}")
        else:
            self.layout = "compressed-tensors"
            self.fmt = "nvfp4" if q["format"] == "nvfp4-pack-quantized" else "mxfp4"
            group = next(iter(q["config_groups"].values()))
            self.w4a4 = bool(group.get("input_activations"))
        self.tensors = read_tensors(directory)

    @property
    def scheme(self):
        return self.fmt + ("" if self.w4a4 else "a16")

    def weight(self, module):
        t = self.tensors
        if self.layout == "modelopt":
            names = ("weight", "weight_scale", "weight_scale_2", "input_scale", "dequant")
        else:
            names = ("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale", "quant")
        packed = t[f"{module}.{names[0]}"]
        k = packed.shape[1] * 2
        sbytes = t[f"{module}.{names[1]}"].view(np.uint8)
        scale = e4m3_decode(sbytes) if self.fmt == "nvfp4" else e8m0_decode(sbytes)
        w = Weight(self.fmt, self.w4a4, unpack_fp4(packed, k), scale)
        if self.fmt == "nvfp4":
            _, w.gs_d = _scale_pair(t[f"{module}.{names[2]}"], names[4])
            if self.w4a4:  # W4A16 ignores any activation scale the checkpoint carries
                w.in_gs_q, w.in_gs_d = _scale_pair(t[f"{module}.{names[3]}"], names[4])
        return w

    def experts(self, layer_prefix):
        """The experts of MoE layer `layer_prefix` ("model.layers.0"): a list of (gate, up, down)."""
        out, e = [], 0
        while f"{layer_prefix}.mlp.experts.{e}.gate_proj.{self._weight_name}" in self.tensors:
            p = f"{layer_prefix}.mlp.experts.{e}"
            out.append(tuple(self.weight(f"{p}.{proj}") for proj in ("gate_proj", "up_proj", "down_proj")))
            e += 1
        if not out:
            raise KeyError(f"{self.directory}: no experts under {layer_prefix}")
        return out

    @property
    def _weight_name(self):
        return "weight" if self.layout == "modelopt" else "weight_packed"

    def top_k(self):
        return int(self.config["num_experts_per_tok"])

    def renormalize(self):
        return bool(self.config.get("norm_topk_prob", True))


# ---------------------------------------------------------------------------------------------
# Linear (FP4.md §3 epilogue): value and bound of every output.


@dataclass
class Result:
    value: np.ndarray  # float64, the output before its final rounding
    bound: np.ndarray  # |conforming fp32 output - value| <= bound
    stats: dict = field(default_factory=dict)
    slack: object = 0.0  # the part of bound that only the W4A16 integer grid needs (linear)

    def accepts(self, out):
        """Boolean mask: BF16 outputs must lie between the BF16 roundings of value ∓ bound, fp32
        outputs within value ± bound."""
        if out.dtype == ml_dtypes.bfloat16:
            o = out.astype(np.float64)
            return (round_to_bf16(self.value - self.bound) <= o) & (o <= round_to_bf16(self.value + self.bound))
        o = out.astype(np.float64)
        return np.abs(o - self.value) <= self.bound


def _activation_values(w, x):
    """(a float64 [m, k], alpha float64): what the layer multiplies the weight with, and its factor."""
    x32 = bf16_bits_to_float64(x).astype(np.float32)
    if not w.w4a4:
        return x32.astype(np.float64), float(w.gs_d)
    a = quantized_activations(x32, w.fmt, w.in_gs_q)
    return a, float(np.float32(w.in_gs_d * w.gs_d) if w.fmt == "nvfp4" else 1.0)


def w4a16_int_grid(a, chunk=16):
    """BF16 activations a (float64 [m, k], k a multiple of `chunk`) on their chunks' integer grid:
    each chunk rounded (to nearest, ties to even) to a multiple of 2^(e - 14), 2^e the smallest power
    of two above its largest magnitude, at least 2^-125; chunks with NaN or infinities unchanged.
    The linear W4A16 decode on CPUs takes chunks of 16; the MoE layer's FC1 inputs 16, FC2's 8."""
    c = a.reshape(a.shape[0], -1, chunk)
    largest = np.max(np.abs(c), axis=2, keepdims=True)
    _, e = np.frexp(largest)  # largest < 2^e
    e = np.maximum(e, -125)
    with np.errstate(invalid="ignore"):
        g = np.ldexp(np.rint(np.ldexp(c, 14 - e)), e - 14)
    keep = ~np.all(np.isfinite(c), axis=2, keepdims=True) | (largest == 0)
    return np.where(keep, c, g).reshape(a.shape)


def linear(w, x_bits):
    """y = alpha · Σ_k a·w for BF16 bits x [m, k]; the bound of an fp32 implementation (fp32
    output; accepts() widens it for BF16 outputs). W4A16: plus Σ_k |w|·|grid(a) - a|, for an
    implementation that multiplies the activations on their integer grid (w4a16_int_grid)."""
    a, alpha = _activation_values(w, x_bits)
    wb = w.block_scaled()
    k = wb.shape[1]
    value = alpha * (a @ wb.T)
    abs_terms = abs(alpha) * (np.abs(a) @ np.abs(wb).T)
    slack = 0.0
    if not w.w4a4:
        with np.errstate(invalid="ignore"):
            deviation = np.nan_to_num(np.abs(w4a16_int_grid(a) - a), nan=0.0)
        slack = abs(alpha) * (deviation @ np.abs(wb).T)
    bound = gamma(k + 4) * (abs_terms + slack) + slack + TINY
    return Result(value, bound, slack=gamma(k + 4) * slack + slack)


# ---------------------------------------------------------------------------------------------
# MoE (FP4.md §6).


def softmax_topk(logits, top_k, renormalize):
    """(ids int32 [T, k], weights float64 [T, k], relative error bound of fp32 weights)."""
    logits = np.asarray(logits, dtype=np.float64)
    t, e = logits.shape
    # top-k by logit value, ties to the lower index (a stable sort of the negated logits)
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :top_k].astype(np.int32)
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    w = np.take_along_axis(p, ids, axis=1)
    if renormalize:
        w = w / w.sum(axis=1, keepdims=True)
    # fp32: max subtraction, exp (4 ulp), a sum of E terms, one division; renormalization: a sum
    # of k terms and a division. A generous bound of the relative error of each weight.
    rel = 2 * (8 + e + 4 + (top_k + 4 if renormalize else 0)) * U
    return ids, w, rel


def grouped_topk(logits, top_k, renormalize, scoring="softmax", groups=1, top_groups=1, bias=None, scaling=1.0):
    """vLLM's grouped_topk (DeepSeek-V3's noaux_tc gate with a bias): (ids int32 [T, k], weights
    float64 [T, k], relative error bound of fp32 weights). Scores are softmax or sigmoid; experts
    are chosen by score + bias among the top_groups groups (ranked by their two best keys with a
    bias, else their best); the weights are the chosen scores, renormalized (by their sum + 1e-20),
    times scaling. Ties go to the lower index (stable sorts)."""
    logits = np.asarray(logits, dtype=np.float64)
    t, e = logits.shape
    if scoring == "softmax":
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        scores = z / z.sum(axis=1, keepdims=True)
    else:
        scores = 1.0 / (1.0 + np.exp(-logits))
    choice = scores if bias is None else scores + np.asarray(bias, dtype=np.float64)[None, :]
    per_group = choice.reshape(t, groups, e // groups)
    group_scores = np.sort(per_group, axis=2)[:, :, -2:].sum(axis=2) if bias is not None else per_group.max(axis=2)
    kept_groups = np.argsort(-group_scores, axis=1, kind="stable")[:, :top_groups]
    kept = np.zeros((t, groups), dtype=bool)
    np.put_along_axis(kept, kept_groups, True, axis=1)
    masked = np.where(np.repeat(kept, e // groups, axis=1), choice, -np.inf)
    ids = np.argsort(-masked, axis=1, kind="stable")[:, :top_k].astype(np.int32)
    w = np.take_along_axis(scores, ids, axis=1)
    if renormalize:
        w = w / (w.sum(axis=1, keepdims=True) + float(np.float32(1e-20)))  # DeepSeek-V3's MoEGate adds 1e-20
    w = w * scaling
    rel = 2 * (8 + (e + 4 if scoring == "softmax" else 0) + (top_k + 5 if renormalize else 0) + 1) * U
    return ids, w, rel


def _silu(g):
    return g / (1.0 + np.exp(-g))


def _silu_slope(g):
    s = 1.0 / (1.0 + np.exp(-g))
    return np.abs(s * (1.0 + g * (1.0 - s)))


def _bf16_neighbours(lo, hi):
    """All BF16 values in [lo, hi] (both already BF16), at most 64."""
    vals = [lo]
    while vals[-1] < hi and len(vals) < 64:
        b = np.array([vals[-1]], dtype=np.float32).astype(ml_dtypes.bfloat16)
        bits = int(b.view(np.uint16)[0])
        if bits & 0x8000:
            bits = 0x0001 if (bits & 0x7FFF) == 0 else bits - 1
        else:
            bits += 1
        vals.append(float(bf16_bits_to_float64(np.array([bits], dtype=np.uint16))[0]))
    return vals


def _fc2_grid_deviation(lo, hi):
    """W4A16 on CPUs (NVFP4 and MXFP4): how far FC2's inputs may move on their integer grid (chunks of 8) when
    each element is one of the BF16 values in [lo, hi]: the grid step 2^(e - 14) from the largest
    magnitude any element may take; an element whose every candidate has a BF16 exponent at least
    e - 7 lies on the grid (a multiple of its own ulp, 2^(e - 14) or more), any other may move by
    half a step."""
    T, I = lo.shape
    l, h = lo.reshape(T, I // 8, 8), hi.reshape(T, I // 8, 8)
    largest = np.maximum(np.abs(l), np.abs(h)).max(axis=2, keepdims=True)
    finite = np.isfinite(l).all(axis=2, keepdims=True) & np.isfinite(h).all(axis=2, keepdims=True)
    _, e = np.frexp(np.where(finite, largest, 0.0))
    e = np.maximum(e, -125)
    smallest = np.where(np.sign(l) * np.sign(h) > 0, np.minimum(np.abs(l), np.abs(h)), 0.0)
    exact = (l == h) & (np.ldexp(l, 14 - e) == np.floor(np.ldexp(l, 14 - e)))
    on_grid = exact | (smallest >= np.ldexp(1.0, e - 7))
    dev = np.where(on_grid | ~finite | (largest == 0), 0.0, np.ldexp(1.0, e - 15))
    return dev.reshape(T, I)


class _Expert:
    def __init__(self, gate, up, down):
        self.fmt, self.w4a4 = gate.fmt, gate.w4a4
        self.block = gate.block
        self.gate, self.up, self.down = gate.block_scaled(), up.block_scaled(), down.block_scaled()
        self.gs_gate, self.gs_up, self.gs_down = gate.gs_d, up.gs_d, down.gs_d
        # FC1 input scale: the wider of gate's and up's (larger dequant direction; on a tie the
        # smaller quant direction), per expert.
        pairs = sorted([(gate.in_gs_d, -gate.in_gs_q, gate), (up.in_gs_d, -up.in_gs_q, up)],
                       key=lambda p: (p[0], p[1]))
        wide = pairs[-1][2]
        self.in_gs_q, self.in_gs_d = wide.in_gs_q, wide.in_gs_d

    def quantize_fc2(self, a_rows):
        """W4A4: dequantized FC2 inputs (without global scale) of BF16-valued rows [r, I]."""
        return quantized_activations(np.asarray(a_rows, dtype=np.float32), self.fmt, np.float32(1))

    def _fc2_deviation(self, a, lo, hi, ambiguous, fc2_in, stats):
        """W4A4: for each FC2 input element, the largest difference between what the device may
        have quantized (from any BF16 rounding of the SwiGLU outputs it may have made) and
        fc2_in. A block's possible amax is one of its elements' candidate magnitudes at or above
        the smallest possible amax, so its scale byte is one of theirs; with the byte fixed every
        element quantizes on its own. Taking every (byte, candidate) pair covers every variant."""
        B, fmt = self.block, self.fmt
        dev = np.zeros_like(a)
        T, I = a.shape
        for t, b in zip(*np.nonzero(ambiguous.reshape(T, I // B, B).any(axis=2))):
            sl = slice(b * B, (b + 1) * B)
            cands = [_bf16_neighbours(l, h) for l, h in zip(lo[t, sl], hi[t, sl])]
            amax_lo = max(0.0 if c[0] <= 0 <= c[-1] else min(abs(c[0]), abs(c[-1])) for c in cands)
            amaxes = sorted({abs(v) for c in cands for v in c if abs(v) >= amax_lo})
            scale_bytes = np.unique(scale_byte(np.array(amaxes, np.float32), fmt, np.float32(1)))
            stats["fc2_blocks_ambiguous"] = stats.get("fc2_blocks_ambiguous", 0) + 1
            stats["fc2_block_scales_max"] = max(stats.get("fc2_block_scales_max", 0), len(scale_bytes))
            for i, c in enumerate(cands):
                values = np.array(c, np.float32)[None, :].repeat(len(scale_bytes), axis=0)  # [S, n]
                codes = quantize_with_scale(values, scale_bytes, fmt, np.float32(1))
                deq = e2m1_decode(codes) * scale_value(scale_bytes, fmt)[:, None]
                dev[t, b * B + i] = np.max(np.abs(deq - fc2_in[t, b * B + i]))
        return dev

    def forward(self, x, stats):
        """x float32 [T, H] (BF16 values) → (y float64 [T, H], bound [T, H])."""
        nv = self.fmt == "nvfp4"
        if self.w4a4:
            xin = quantized_activations(x, self.fmt, self.in_gs_q if nv else np.float32(1))
            in_d = self.in_gs_d if nv else np.float32(1)
        else:
            xin, in_d = x.astype(np.float64), np.float32(1)
        H = x.shape[1]
        g_fac = float(np.float32(in_d * self.gs_gate)) if nv else 1.0
        u_fac = float(np.float32(in_d * self.gs_up)) if nv else 1.0
        g = g_fac * (xin @ self.gate.T)
        u = u_fac * (xin @ self.up.T)
        # W4A16 (NVFP4 and MXFP4) on CPUs may multiply the inputs on their integer grid (chunks of
        # 16): Σ|w|·|grid(x) - x| more, and terms as much larger.
        grid = not self.w4a4
        xdev = np.zeros_like(xin)
        if grid:
            with np.errstate(invalid="ignore"):
                xdev = np.nan_to_num(np.abs(w4a16_int_grid(xin, 16) - xin), nan=0.0)
        dg, du = xdev @ np.abs(self.gate).T, xdev @ np.abs(self.up).T
        e_g = g_fac * (gamma(H + 4) * (np.abs(xin) @ np.abs(self.gate).T + dg) + dg) + TINY
        e_u = u_fac * (gamma(H + 4) * (np.abs(xin) @ np.abs(self.up).T + du) + du) + TINY
        sg = _silu(g)
        e_s = (_silu_slope(g) + 0.25 * e_g) * e_g + 16 * U * np.abs(sg) + TINY
        av = sg * u
        e_prod = np.abs(sg) * e_u + np.abs(u) * e_s + e_s * e_u
        e_a = e_prod + U * (np.abs(av) + e_prod)
        a = round_to_bf16(av)
        lo, hi = round_to_bf16(av - e_a), round_to_bf16(av + e_a)
        ambiguous = lo != hi
        stats["swiglu_values"] = stats.get("swiglu_values", 0) + a.size
        stats["swiglu_ambiguous"] = stats.get("swiglu_ambiguous", 0) + int(ambiguous.sum())

        if not self.w4a4:
            fc2_in = a
            dev = np.maximum(np.abs(lo - a), np.abs(hi - a))
            if grid:
                dev = dev + _fc2_grid_deviation(lo, hi)
        else:
            fc2_in = self.quantize_fc2(a)
            dev = self._fc2_deviation(a, lo, hi, ambiguous, fc2_in, stats)

        fac = float(self.gs_down) if nv else 1.0
        I = a.shape[1]
        y = fac * (fc2_in @ self.down.T)
        dev_sum = dev @ np.abs(self.down).T
        abs_sum = np.abs(fc2_in) @ np.abs(self.down).T
        bound = (dev_sum + gamma(I + 4) * (abs_sum + dev_sum)) * fac + TINY
        return y, bound


class Moe:
    """The reference of one MoE layer of a checkpoint (per-expert input scales, dynamic FC2
    input scale: the library's defaults)."""

    def __init__(self, checkpoint, layer_prefix, expert_map=None):
        self.experts = [_Expert(*e) for e in checkpoint.experts(layer_prefix)]
        self.expert_map = None if expert_map is None else list(expert_map)
        self.num_global = len(self.experts) if expert_map is None else len(expert_map)
        self.hidden = self.experts[0].gate.shape[1]

    def run(self, x_bits, ids, weights, weight_rel_error=0.0):
        x = bf16_bits_to_float64(x_bits).astype(np.float32)
        ids = np.asarray(ids)
        weights = np.asarray(weights, dtype=np.float64)
        T, k = ids.shape
        if ids.min(initial=0) < 0 or ids.max(initial=0) >= self.num_global:
            raise ValueError("expert id out of range")
        value = np.zeros((T, self.hidden))
        terms = np.zeros((T, self.hidden))  # Σ |w_s · y_s|
        bound = np.zeros((T, self.hidden))
        stats = {}
        for g in np.unique(ids):
            local = int(g) if self.expert_map is None else self.expert_map[int(g)]
            if local < 0:
                continue
            rows = np.nonzero((ids == g).any(axis=1))[0]
            y, yb = self.experts[local].forward(x[rows], stats)
            for s in range(k):
                sel = ids[rows, s] == g
                r = rows[sel]
                wgt = weights[r, s][:, None]
                value[r] += wgt * y[sel]
                terms[r] += np.abs(wgt * y[sel])
                bound[r] += np.abs(wgt) * yb[sel] * (1 + weight_rel_error) + weight_rel_error * np.abs(wgt * y[sel])
        bound += gamma(2 * k + 2) * (terms + bound) + TINY
        return Result(value, bound, stats)

    def run_logits(self, x_bits, logits, top_k, renormalize):
        ids, w, rel = softmax_topk(logits, top_k, renormalize)
        return self.run(x_bits, ids, w, rel), ids
