#!/usr/bin/env python3
"""Summarizes one run of bench/gpu/run-h100.sh (moe.csv, linear.csv, torch.csv, launch_floor.txt in
OUT_DIR) as the Markdown tables of the README's "GPU performance" section, with the ratios against the bar:
decode (T <= 8) at least 60 % of the copy bandwidth in streamed weight bytes and at least 2.5x the
PyTorch BF16 baseline; prefill (T = 512) in TFLOP/s with its ratio to PyTorch.

    python3 bench/gpu/summarize.py OUT_DIR
"""
import csv
import os
import sys


def read(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(line for line in f if not line.startswith("#"))]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    moe, linear, torch = (read(os.path.join(out, n)) for n in ("moe.csv", "linear.csv", "torch.csv"))
    copy = next((float(r["weight_bytes_bf16"]) for r in torch if r["kind"] == "copy"), 0.0)
    stream = max((float(r["stream_gbps"]) for r in moe + linear), default=0.0) * 1e9
    if not copy:  # no PyTorch run (FP4CL_GPU_PARTS without torch): the streaming-read probe instead
        print("(No PyTorch copy bandwidth in this run: % copy BW below is relative to fp4cl's streaming-read probe.)\n")
        copy = stream
    print(f"Copy bandwidth (PyTorch `copy_`, read + write): **{copy / 1e12:.2f} TB/s**; "
          f"fp4cl's streaming-read probe in the same runs: {stream / 1e12:.2f} TB/s.\n")
    baseline = {}
    for r in torch:
        if r["kind"] != "moe":
            continue
        key = (r["model"], int(r["tokens"]))
        us = float(r["us_median"])
        if key not in baseline or us < baseline[key][0]:
            baseline[key] = (us, r["impl"], float(r["tflops"]))
    print("### MoE layer (fp4cl vs PyTorch BF16)\n")
    print("| model | scheme | T | fp4cl strategy | fp4cl µs | weights MB | GB/s | % copy BW | fp4cl TFLOP/s "
          "| torch µs (impl) | torch TFLOP/s | speed-up vs torch | bar |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in moe:
        T = int(r["tokens"])
        us = float(r["us_median"])
        gbps = float(r["weight_bytes"]) / (us * 1e-6)
        frac = gbps / copy if copy else 0.0
        tflops = float(r["gflops"]) / 1e3
        base = baseline.get((r["shape"], T))
        speed = base[0] / us if base else 0.0
        if T <= 8:
            ok = frac >= 0.60 and speed >= 2.5
            bar = ("met" if ok else "not met") + f" (≥60 % BW: {'yes' if frac >= 0.6 else 'no'}, ≥2.5×: {'yes' if speed >= 2.5 else 'no'})"
        elif T >= 512:
            bar = "prefill: reported"
        else:
            bar = "-"
        torch_cell = f"{base[0]:.1f} ({base[1]})" if base else "-"
        torch_tf = f"{base[2]:.2f}" if base else "-"
        print(f"| {r['shape']} | {r['scheme']} | {T} | {r['kernel']} | {us:.1f} | {float(r['weight_bytes']) / 1e6:.1f} "
              f"| {gbps / 1e9:.0f} | {100 * frac:.1f} % | {tflops:.2f} | {torch_cell} | {torch_tf} | {speed:.2f}× | {bar} |")
    sweep = read(os.path.join(out, "moe-all.csv"))
    if sweep:
        print("\n### MoE strategies compared (NVFP4 W4A16, each forced; µs per call)\n")
        kernels = sorted({r["kernel"] for r in sweep})
        print("| model | T | " + " | ".join(kernels) + " |")
        print("|---|---:|" + "---:|" * len(kernels))
        cells = {}
        for r in sweep:
            cells.setdefault((r["shape"], int(r["tokens"])), {})[r["kernel"]] = float(r["us_median"])
        for (shape, T), by in cells.items():
            print(f"| {shape} | {T} | " + " | ".join(f"{by[k]:.1f}" if k in by else "-" for k in kernels) + " |")
    if linear:
        print("\n### Linear layers (fp4cl)\n")
        print("| N × K | scheme | M | kernel | µs | weights MB | GB/s | % copy BW | TFLOP/s |")
        print("|---|---|---:|---|---:|---:|---:|---:|---:|")
        for r in linear:
            us = float(r["us_median"])
            gbps = float(r["weight_bytes"]) / (us * 1e-6)
            print(f"| {r['shape']} | {r['scheme']} | {r['tokens']} | {r['kernel']} | {us:.1f} | "
                  f"{float(r['weight_bytes']) / 1e6:.1f} | {gbps / 1e9:.0f} | {100 * gbps / copy if copy else 0:.0f} % | "
                  f"{float(r['gflops']) / 1e3:.2f} |")
    linear_sweep = read(os.path.join(out, "linear-all.csv"))
    if linear_sweep:
        print("\n### Linear decode strategies compared (each forced; µs per call, % copy BW)\n")
        kernels = list(dict.fromkeys(r["kernel"] for r in linear_sweep))
        print("| N × K | scheme | M | " + " | ".join(kernels) + " |")
        print("|---|---|---:|" + "---:|" * len(kernels))
        cells = {}
        for r in linear_sweep:
            us = float(r["us_median"])
            frac = float(r["weight_bytes"]) / (us * 1e-6) / copy if copy else 0.0
            cells.setdefault((r["shape"], r["scheme"], int(r["tokens"])), {})[r["kernel"]] = f"{us:.1f} ({100 * frac:.0f} %)"
        for (shape, scheme, M), by in cells.items():
            print(f"| {shape} | {scheme} | {M} | " + " | ".join(by.get(k, "-") for k in kernels) + " |")
    floor = os.path.join(out, "launch_floor.txt")
    if os.path.exists(floor):
        print("\n### What one or two kernels read at best (bench/standalone/launch_floor.c)\n")
        with open(floor) as f:
            print("```\n" + f.read().rstrip() + "\n```")
    bad = [r for r in moe + sweep + linear + linear_sweep if r.get("check", "").strip() not in ("ok", "passed", "skipped") and not r.get("check", "").startswith("ok")]
    if bad:
        print(f"\n{len(bad)} row(s) did not pass the reference check: " + "; ".join(
            f"{r['op']} {r['shape']} {r['scheme']} T={r['tokens']}: {r['check']}" for r in bad))


if __name__ == "__main__":
    main()
