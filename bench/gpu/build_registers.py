#!/usr/bin/env python3
"""The registers, local memory and spills of each kernel that NVIDIA's OpenCL driver built, read
from fp4cl's debug log, and for moe_mma.cl's kernels the work-groups a compute unit can hold.

Run the bench with an empty program cache, `FP4CL_BUILD_FLAGS=-cl-nv-verbose FP4CL_LOG=debug`
and `CUDA_CACHE_DISABLE=1` (bench/gpu/registers.sh does): each program's build log then holds
the driver's own ptxas report, which this reads from the log on stdin or in FILE. No CUDA toolkit
is needed (bench/gpu/sass.sh assembles the PTX again with one for the SASS).

    build_registers.py [FILE] [--match TEXT] [--registers N] [--warps N] [--local-bytes N]
                       [--groups N]

One line per kernel and build options (repeats dropped):
    KERNEL  R registers, L B local, S B spill stores | W work-items: G a compute unit (LIMIT) | OPTIONS
A moe_mma.cl kernel's work-group is 32 · MMA_RT · MMA_KSPLIT work-items (· MMA_TOPK with
MMA_TOKEN_SUM); G is the fewest of what its registers, warps and local memory allow and the cap
on work-groups, and LIMIT names which bounds it (a tie names the first). Defaults: one compute unit of an
H100 or H200 (sm_90): 65536 registers in 256-register units a warp, 64 warps, 233472 bytes of
shared memory (1024 of them reserved a work-group) and 32 work-groups. Other kernels: their
work-group is the caller's, shown as "-". Exit status 1 when the log holds no ptxas report.
"""
import argparse
import math
import re
import sys

BUILD_LOG = re.compile(r'build log of (\S+) \("([^"]*)"\):')
FUNCTION = re.compile(r"ptxas\s+info\s*:\s*Function properties for (\S+)")
SPILLS = re.compile(r"(\d+) bytes spill stores")
USED = re.compile(r"ptxas\s+info\s*:\s*Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")


def defines(options):
    """-DNAME=VALUE options as a dict of ints (NAME alone: 1)."""
    out = {}
    for m in re.finditer(r"-D\s*(\w+)(?:=(\S+))?", options):
        try:
            out[m.group(1)] = int(m.group(2)) if m.group(2) is not None else 1
        except ValueError:
            pass
    return out


def work_items(source, options):
    """moe_mma.cl's work-group size (MMA_LOCAL) from its build options, else None."""
    if source != "moe_mma.cl":
        return None
    d = defines(options)
    n = 32 * d.get("MMA_RT", 1) * d.get("MMA_KSPLIT", 1)
    if d.get("MMA_TOKEN_SUM", 0):
        n *= d.get("MMA_TOPK", 1)
    return n


def resident(registers, local_bytes, items, limits):
    """(work-groups a compute unit, what bounds them) for a kernel of `registers` a work-item."""
    warps = math.ceil(items / 32)
    per_warp = math.ceil(registers * 32 / 256) * 256
    bounds = [
        ("registers", (limits.registers // per_warp) // warps if per_warp else limits.groups),
        ("warps", limits.warps // warps),
        ("local memory", limits.local_bytes // (local_bytes + 1024)),
        ("work-groups", limits.groups),
    ]
    bound, groups = min(bounds, key=lambda b: b[1])
    return groups, bound


def parse(lines):
    """(source, options, kernel, registers, local bytes, spill stores) for each ptxas report."""
    source = options = kernel = None
    spills = 0
    for line in lines:
        m = BUILD_LOG.search(line)
        if m:
            source, options, kernel, spills = m.group(1), m.group(2), None, 0
            continue
        m = FUNCTION.search(line)
        if m:
            kernel, spills = m.group(1), 0
            continue
        m = SPILLS.search(line)
        if m and line.lstrip().startswith("ptxas"):
            spills = int(m.group(1))
            continue
        m = USED.search(line)
        if m and source is not None and kernel is not None:
            yield source, options, kernel, int(m.group(1)), int(m.group(2) or 0), spills
            kernel = None


def shown_options(options):
    return " ".join(o for o in options.split() if not o.startswith("-cl-"))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", help="the debug log (default: stdin)")
    ap.add_argument("--match", default="", help="keep kernels whose build options hold this text")
    ap.add_argument("--registers", type=int, default=65536, help="registers a compute unit")
    ap.add_argument("--warps", type=int, default=64, help="warps a compute unit")
    ap.add_argument("--local-bytes", type=int, default=233472, help="shared memory a compute unit")
    ap.add_argument("--groups", type=int, default=32, help="work-groups a compute unit, at most")
    args = ap.parse_args(argv)
    with (open(args.file, encoding="utf-8", errors="replace") if args.file else sys.stdin) as f:
        reports = list(parse(f))
    if not reports:
        print("build_registers.py: no ptxas report in the log (build with FP4CL_BUILD_FLAGS=-cl-nv-verbose, "
              "FP4CL_LOG=debug, an empty program cache and CUDA_CACHE_DISABLE=1 on NVIDIA's OpenCL)",
              file=sys.stderr)
        return 1
    seen = set()
    for source, options, kernel, registers, local_bytes, spills in reports:
        if args.match and args.match not in options:
            continue
        key = (source, options, kernel)
        if key in seen:
            continue
        seen.add(key)
        items = work_items(source, options)
        if items is None:
            fit = "-"
        else:
            groups, bound = resident(registers, local_bytes, items, args)
            fit = f"{items} work-items: {groups} a compute unit ({bound})"
        print(f"{kernel}  {registers} registers, {local_bytes} B local, {spills} B spill stores | {fit} | "
              f"{source} {shown_options(options)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
