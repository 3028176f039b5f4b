#!/usr/bin/env python3
"""fp4cl's FP4 formats against ml_dtypes, an implementation nobody here wrote.

Usage: ml_dtypes_interop.py PATH_TO_fp4cl_formats_dump

The helper writes fp4cl's encodings of a large set of float32 values (every BF16 pattern, the
formats' rounding ties and their neighbours, random floats) from the host and from the OpenCL
device, every code's decoded value, and NVFP4/MXFP4 quantizations of BF16 rows from the host
reference and the quantize kernels. This script checks them against ml_dtypes' float4_e2m1fn,
float8_e4m3fn, float8_e8m0fnu and bfloat16 casts, and against the FP4.md §3/§4 recipes and the §7
swizzle written here in numpy. Where fp4cl deliberately differs from ml_dtypes (E4M3 saturates
at 448 where ml_dtypes gives NaN above 464; E8M0 saturates and handles subnormals by nearest
value) the comparison is restricted and fp4cl's own rule is checked separately.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

FAILURES = []


def check(name, ok_mask, detail=""):
    """Records a check; ok_mask is a boolean array (or bool) that must be all true."""
    ok = np.asarray(ok_mask)
    bad = int(ok.size - np.count_nonzero(ok))
    status = "ok" if bad == 0 else f"FAILED ({bad} of {ok.size})"
    print(f"{name}: {status} [{ok.size} compared]{(' ' + detail) if detail and bad else ''}")
    if bad:
        FAILURES.append(name)
    return bad == 0


def first_mismatch(values, ours, theirs):
    idx = np.flatnonzero(ours != theirs)
    if idx.size == 0:
        return ""
    i = idx[0]
    return f"first at value {values[i]!r} (bits 0x{values.view(np.uint32)[i]:08x}): ours 0x{ours[i]:x}, ml_dtypes 0x{theirs[i]:x}"


def load(directory, manifest, name):
    meta = manifest["files"][name]
    data = np.fromfile(directory / name, dtype=np.dtype(meta["dtype"]).newbyteorder("<"))
    assert data.size == meta["count"], f"{name}: {data.size} values, manifest says {meta['count']}"
    return data


def same_floats(a, b):
    """Bitwise equality, any NaN equal to any NaN."""
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


E2M1_VALUES = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)


def check_codecs(d, m):
    x = load(d, m, "values.f32")
    sign = np.signbit(x)
    nan = np.isnan(x)

    # Decoders: every code.
    for fmt, dtype, count in (("e2m1", ml_dtypes.float4_e2m1fn, 16), ("e4m3", ml_dtypes.float8_e4m3fn, 256),
                              ("e8m0", ml_dtypes.float8_e8m0fnu, 256)):
        theirs = np.arange(count, dtype=np.uint8).view(dtype).astype(np.float32)
        for side in ("host", "device"):
            ours = load(d, m, f"{side}_decode_{fmt}.f32")
            check(f"{side} {fmt.upper()} decode of all {count} codes == ml_dtypes", same_floats(ours, theirs))

    host = {f: load(d, m, f"host_{f}.u8") for f in ("e2m1", "e4m3", "e8m0")}
    host["bf16"] = load(d, m, "host_bf16.u16")

    # E2M1: ml_dtypes rounds to nearest even and saturates at ±6 like fp4cl; NaN has no E2M1
    # encoding (fp4cl saturates it to ±6 with its sign bit).
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    ok = ~nan
    check("host E2M1 encode == ml_dtypes (all non-NaN values)", host["e2m1"][ok] == theirs[ok],
          first_mismatch(x[ok], host["e2m1"][ok], theirs[ok]))
    check("host E2M1 encode of NaN is ±6 (0x7/0xF)", host["e2m1"][nan] == np.where(sign[nan], 0xF, 0x7))

    # E4M3: compare |x| <= 448; above, fp4cl saturates to ±448 where ml_dtypes gives NaN (>= 464).
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    in_range = ~nan & (np.abs(x) <= 448)
    check("host E4M3 encode == ml_dtypes (|x| <= 448)", host["e4m3"][in_range] == theirs[in_range],
          first_mismatch(x[in_range], host["e4m3"][in_range], theirs[in_range]))
    over = ~nan & (np.abs(x) > 448)
    check("host E4M3 encode saturates |x| > 448 (Inf included) to ±448", host["e4m3"][over] == np.where(sign[over], 0xFE, 0x7E))
    check("host E4M3 encode of NaN is NaN (0x7F with the sign)", host["e4m3"][nan] == np.where(sign[nan], 0xFF, 0x7F))

    # E8M0: ml_dtypes rounds the significand half up; compare normal positive values below the
    # overflow tie 1.5·2^127. fp4cl saturates outside that range and rounds subnormals to the
    # nearer of 2^-127 and 2^-126 (ml_dtypes rounds their bits, which is not the nearest value).
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = x.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    normal = ~nan & (x >= np.float32(2.0 ** -126)) & (x < np.float32(1.5 * 2.0 ** 127))
    check("host E8M0 encode == ml_dtypes (normal x < 1.5·2^127)", host["e8m0"][normal] == theirs[normal],
          first_mismatch(x[normal], host["e8m0"][normal], theirs[normal]))
    small = ~nan & (x >= 0) & (x < np.float32(2.0 ** -126))  # -0.0 included
    check("host E8M0 encode of 0 <= x < 2^-126 is the nearest of 2^-127, 2^-126",
          host["e8m0"][small] == np.where(np.abs(x[small]) >= np.float32(1.5 * 2.0 ** -127), 1, 0))
    big = ~nan & (x >= np.float32(1.5 * 2.0 ** 127))
    check("host E8M0 encode saturates x >= 1.5·2^127 (Inf included) to 2^127", host["e8m0"][big] == 0xFE)
    invalid = nan | ((x < 0) & (x != 0))
    check("host E8M0 encode of negative numbers and NaN is NaN (0xFF)", host["e8m0"][invalid] == 0xFF)

    # BF16: round to nearest even; NaN stays NaN.
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    check("host float -> BF16 == ml_dtypes (non-NaN)", host["bf16"][~nan] == theirs[~nan],
          first_mismatch(x[~nan], host["bf16"][~nan], theirs[~nan]))
    check("host float -> BF16 keeps NaN", np.isnan(bf16_to_f32(host["bf16"][nan])))

    # The OpenCL device's scalar and vector codecs: bit for bit the host's, NaN inputs included.
    for f in ("e2m1", "e4m3", "e8m0"):
        check(f"device {f.upper()} encode == host (all values)", load(d, m, f"device_{f}.u8") == host[f])
    check("device float -> BF16 == host (all values)", load(d, m, "device_bf16.u16") == host["bf16"])
    check("device vector E2M1 encode == host (all values)", load(d, m, "device_vector_e2m1.u8") == host["e2m1"])
    check("device vector float -> BF16 == host (all values)", load(d, m, "device_vector_bf16.u16") == host["bf16"])


def pack(codes):
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def nvfp4_recipe(x, gs):
    """FP4.md §3 in numpy float32 with ml_dtypes' casts. x: [rows, cols] float32."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 16, 16)
    amax = np.abs(blocks).max(axis=2)
    gs = np.float32(gs)
    target = gs * (amax * np.float32(1.0 / 6.0))
    sf = np.clip(target, 0, 448).astype(ml_dtypes.float8_e4m3fn)
    sff = sf.astype(np.float32)
    with np.errstate(divide="ignore"):
        mult = np.where(sff == 0, np.float32(0), np.float32(1) / (sff * (np.float32(1) / gs))).astype(np.float32)
    with np.errstate(invalid="ignore"):
        scaled = np.clip(blocks * mult[..., None], -6, 6)
    codes = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, cols)
    w = (E2M1_VALUES[codes].reshape(rows, cols // 16, 16) * sff[..., None]) * (np.float32(1) / gs)
    return pack(codes), sf.view(np.uint8), w.reshape(rows, cols).astype(np.float32)


def mxfp4_recipe(x):
    """FP4.md §4 (the "ceil" rule, exactly) in numpy with ml_dtypes' casts."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // 32, 32)
    amax = np.abs(blocks).max(axis=2).astype(np.float64)
    with np.errstate(divide="ignore"):
        e = np.ceil(np.log2(amax / 6.0))
    e = np.clip(np.nan_to_num(e, nan=-127.0, posinf=127.0, neginf=-127.0), -127, 127)
    for _ in range(2):  # make e the smallest with 6·2^e >= amax, whatever log2's rounding did
        e = np.where((6.0 * np.exp2(e) < amax) & (e < 127), e + 1, e)
        e = np.where((6.0 * np.exp2(e - 1) >= amax) & (e > -127), e - 1, e)
    byte = np.where(amax > 0, e + 127, 0).astype(np.uint8)
    scale = np.exp2(byte.astype(np.float64) - 127).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.clip(blocks / scale[..., None], -6, 6)
    codes = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(rows, cols)
    with np.errstate(over="ignore"):  # 6 × 2^127 is Inf in float32, as in fp32 dequantization
        w = E2M1_VALUES[codes].reshape(rows, cols // 32, 32) * scale[..., None]
    return pack(codes), byte, w.reshape(rows, cols).astype(np.float32)


def swizzle_offset(m, k, kp):
    """FP4.md §7, written out here."""
    return ((m // 128) * (kp // 4) + k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + (k % 4)


def swizzle(scales):
    """Pads to (roundup(M, 128), roundup(K, 4)) with zeros and moves each scale to its offset."""
    rows, kcols = scales.shape
    mp, kp = -(-rows // 128) * 128, -(-kcols // 4) * 4
    out = np.zeros(mp * kp, dtype=np.uint8)
    m, k = np.meshgrid(np.arange(rows), np.arange(kcols), indexing="ij")
    out[swizzle_offset(m, k, kp).ravel()] = scales.ravel()
    return out


def check_quantizations(d, m):
    check("FP4.md §7 worked example: Kp = 8, (33, 5) -> 533", swizzle_offset(33, 5, 8) == 533)
    for prefix, q in m["quantizations"].items():
        rows, cols, gs = q["rows"], q["cols"], q["gs"]
        x = bf16_to_f32(load(d, m, f"{prefix}_input.u16")).reshape(rows, cols)
        if q["format"] == "NVFP4":
            packed, scales, w = nvfp4_recipe(x, gs)
        else:
            packed, scales, w = mxfp4_recipe(x)
        what = f"{q['format']} [{rows}, {cols}] gs {gs:g} ({prefix})"
        for side in ("host", "device"):
            check(f"{side} {what} packed codes == numpy/ml_dtypes recipe",
                  load(d, m, f"{prefix}_{side}_packed.u8") == packed.ravel())
            check(f"{side} {what} block scales == numpy/ml_dtypes recipe",
                  load(d, m, f"{prefix}_{side}_scales.u8") == scales.ravel())
        check(f"device {what} swizzled scales == FP4.md §7 layout of the recipe's scales",
              load(d, m, f"{prefix}_device_swizzled_scales.u8") == swizzle(scales.reshape(rows, -1)))
        check(f"host {what} dequantization == numpy e2m1 × scale × gs_d", same_floats(load(d, m, f"{prefix}_host_dequant.f32"), w.ravel()))

    # FP4.md §8: the spec's bytes, from the host, the device and the numpy recipe.
    expected_packed = np.array([0xD7, 0x01, 0, 0, 0, 0, 0, 0], dtype=np.uint8)
    for side in ("host", "device"):
        check(f"FP4.md §8 worked example, {side}: packed D7 01, scale 0x30",
              np.concatenate([load(d, m, f"worked_example_{side}_packed.u8") == expected_packed,
                              load(d, m, f"worked_example_{side}_scales.u8") == np.array([0x30], dtype=np.uint8)]))
    check("FP4.md §8 worked example, host dequantization 3, -1.5, 0.25, 0",
          load(d, m, "worked_example_host_dequant.f32")[:4] == np.array([3, -1.5, 0.25, 0], dtype=np.float32))
    x = bf16_to_f32(load(d, m, "worked_example_input.u16")).reshape(1, 16)
    packed, scales, _ = nvfp4_recipe(x, 1.0)
    check("FP4.md §8 worked example, numpy/ml_dtypes recipe agrees with the spec",
          np.concatenate([packed.ravel() == expected_packed, scales.ravel() == 0x30]))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory(prefix="fp4cl_interop_") as tmp:
        d = Path(tmp)
        subprocess.run([sys.argv[1], str(d)], check=True)
        m = json.loads((d / "manifest.json").read_text())
        print(f"device: {m['device']}; ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}")
        check_codecs(d, m)
        check_quantizations(d, m)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) FAILED: " + "; ".join(FAILURES))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
