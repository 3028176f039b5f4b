#!/usr/bin/env python3
"""The loops of a `cuobjdump -sass` listing, and where their instructions issue.

    sass_loops.py FILE.sass [--min HMMA] [--hottest]

A loop is a backward branch: the instructions from the branch's target up to the branch. Each
line gives the loop's address range, its instruction count, its HMMA count, the instructions per
HMMA, and its opcodes by the pipe they issue to. On GH100 (sm_90), as NVIDIA describes its SM
(developer forum, "Separate CUDA core pipeline for FP16 and FP32", and the Nsight Compute pipe
list): the ALU pipe takes logic, shifts, integer adds and compares, PRMT and LEA (not IMAD); the
FMA-heavy pipe IMAD and FP32; FP16x2 instructions are dual-issued to both FMA pipes; HMMA goes to
the tensor pipe. The ALU and each FMA pipe take a warp's instruction in 2 cycles (16 lanes), the
scheduler issues one instruction a cycle: a loop whose ALU share is over half its instructions
waits on the ALU, not on issue. (bench/gpu/history-2026-11.md, 2026-11-29: the K loop of the MMA decode.)

--min HMMA keeps the loops with at least that many HMMA (default 0: every loop); --hottest prints
only the loop with the most HMMA (then the most instructions), in one short phrase (sass.sh adds it
to each program's line). Exit status 1, naming the file, when it holds no SASS instruction.
"""
import argparse
import collections
import re
import sys

INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH_TARGET = re.compile(r"\bBRA(?:\.\w+)*\s+(?:`?\()?0x([0-9a-f]+)")

PIPES = [
    ("alu", {"LOP3", "LOP", "SHF", "SHL", "SHR", "PRMT", "LEA", "IADD3", "IADD", "ISETP", "SEL", "PLOP3",
             "IMNMX", "FLO", "POPC", "BMSK", "SGXT", "BREV", "FSEL", "FSETP", "FMNMX", "MOV"}),
    ("fma (IMAD, FP32)", {"IMAD", "IMUL", "IDP", "FFMA", "FMUL", "FADD"}),
    ("fp16x2 (both FMA pipes)", {"HMUL2", "HFMA2", "HADD2"}),
    ("tensor", {"HMMA", "IMMA", "DMMA", "HGMMA"}),
    ("memory", {"LDG", "STG", "LDS", "STS", "LDL", "STL", "LD", "ST", "LDC", "RED", "REDG", "ATOM", "ATOMG",
                "ATOMS", "LDSM", "LDGSTS"}),
]


def opcode(text):
    """The instruction's opcode without its predicate and modifiers: '@!P0 LOP3.LUT R0, ...' -> LOP3."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def pipe_of(op):
    for name, ops in PIPES:
        if op in ops:
            return name
    return "other"


def parse(text):
    """[(address, instruction text)] in listing order."""
    out = []
    for line in text.splitlines():
        m = INSTRUCTION.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2)))
    return out


def loops(instructions):
    """[(start, end, [opcodes])] for each backward branch, by start address."""
    found = []
    for address, text in instructions:
        if opcode(text) != "BRA":
            continue
        m = BRANCH_TARGET.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target <= address:
            found.append((target, address, [opcode(t) for a, t in instructions if target <= a <= address]))
    return sorted(found)


def describe(start, end, ops):
    n = len(ops)
    counts = collections.Counter(ops)
    hmma = counts.get("HMMA", 0)
    by_pipe = collections.defaultdict(collections.Counter)
    for op, c in counts.items():
        by_pipe[pipe_of(op)][op] = c
    per = f", {n / hmma:.1f} a HMMA" if hmma else ""
    parts = []
    for name in [p for p, _ in PIPES] + ["other"]:
        if name in by_pipe:
            total = sum(by_pipe[name].values())
            mix = " ".join(f"{op} {c}" for op, c in by_pipe[name].most_common())
            parts.append(f"{name} {total} ({100 * total / n:.0f} %: {mix})")
    return f"loop 0x{start:x}-0x{end:x}: {n} instructions, {hmma} HMMA{per}; " + "; ".join(parts)


def hottest(found):
    """The short phrase of the loop with the most HMMA, then the most instructions; "" if none."""
    if not found:
        return ""
    start, end, ops = max(found, key=lambda l: (l[2].count("HMMA"), len(l[2])))
    n, hmma = len(ops), ops.count("HMMA")
    alu = sum(pipe_of(op) == "alu" for op in ops)
    per = f", {n / hmma:.1f} a HMMA" if hmma else ""
    return f"loop 0x{start:x}-0x{end:x}: {n} instructions, {hmma} HMMA{per}, alu {100 * alu / n:.0f} %"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sass", help="a cuobjdump -sass listing")
    parser.add_argument("--min", type=int, default=0, metavar="HMMA", help="keep loops with at least HMMA HMMA")
    parser.add_argument("--hottest", action="store_true", help="only the loop with the most HMMA, one phrase")
    args = parser.parse_args()
    try:
        with open(args.sass) as f:
            instructions = parse(f.read())
    except OSError as e:
        print(f"sass_loops.py: {args.sass}: {e.strerror}", file=sys.stderr)
        return 1
    if not instructions:
        print(f"sass_loops.py: {args.sass}: no SASS instructions (a cuobjdump -sass listing expected)", file=sys.stderr)
        return 1
    found = [l for l in loops(instructions) if l[2].count("HMMA") >= args.min]
    if args.hottest:
        print(hottest(found))
        return 0
    for start, end, ops in found:
        print(describe(start, end, ops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
