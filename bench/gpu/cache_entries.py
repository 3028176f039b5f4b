#!/usr/bin/env python3
"""Unpacks fp4cl's program cache (FP4CL_CACHE_DIR): each entry's key (the source hash, the build
options, the device and driver) and its program binary, to see what a run built and with which
options. On NVIDIA's OpenCL the binary is PTX text, which CUDA's `ptxas` assembles and
`cuobjdump -sass` disassembles (bench/gpu/sass.sh does both).

Usage: cache_entries.py CACHE_DIR OUT_DIR [--match=TEXT ...]   (the = form: a TEXT may start with -)

Writes OUT_DIR/eNNN.key and eNNN.bin for each entry whose key holds every TEXT given, plus
eNNN.ptx (the binary without its trailing NUL bytes) where the binary is PTX, and prints one line
an entry: its name, size, kernels (PTX `.entry` names) and build options. The entry format is
host/cl/binary_cache.hpp's: "FP4CLBIN1\\n", the key's length (8 bytes, little endian), the key,
the binary's length, the binary, a 16-byte checksum (not verified here: the library does when it
reads an entry). An entry that does not parse is named on stderr and the exit status is 1.
"""
import argparse
import os
import re
import struct
import sys

MAGIC = b"FP4CLBIN1\n"
CHECKSUM_BYTES = 16


def parse_entry(data):
    """(key, binary) of one cache file's bytes; raises ValueError naming what is wrong."""
    if not data.startswith(MAGIC):
        raise ValueError("not an fp4cl cache entry (no FP4CLBIN1 header)")
    pos = len(MAGIC)
    fields = []
    for what in ("key", "binary"):
        if len(data) - pos < 8:
            raise ValueError(f"truncated before its {what}'s length")
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if n > len(data) - pos:
            raise ValueError(f"truncated in its {what} ({n} bytes declared, {len(data) - pos} left)")
        fields.append(data[pos:pos + n])
        pos += n
    if len(data) - pos != CHECKSUM_BYTES:
        raise ValueError(f"its length does not add up ({len(data) - pos} bytes after the binary, "
                         f"{CHECKSUM_BYTES} expected)")
    return fields[0].decode("utf-8", "replace"), fields[1]


def options_of(key):
    m = re.search(r"^options (.*)$", key, re.M)
    return m.group(1) if m else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--match", action="append", default=[], help="keep entries whose key holds TEXT")
    a = ap.parse_args()
    if not os.path.isdir(a.cache_dir):
        sys.exit(f"cache_entries.py: {a.cache_dir}: not a directory (expected FP4CL_CACHE_DIR)")
    os.makedirs(a.out_dir, exist_ok=True)
    names = sorted(n for n in os.listdir(a.cache_dir) if n.endswith(".clbin"))
    bad = 0
    kept = 0
    for i, name in enumerate(names):
        path = os.path.join(a.cache_dir, name)
        with open(path, "rb") as f:
            data = f.read()
        try:
            key, binary = parse_entry(data)
        except ValueError as e:
            print(f"cache_entries.py: {path}: {e}", file=sys.stderr)
            bad += 1
            continue
        if not all(t in key for t in a.match):
            continue
        kept += 1
        stem = os.path.join(a.out_dir, f"e{i:03d}")
        with open(stem + ".key", "w") as f:
            f.write(key)
        with open(stem + ".bin", "wb") as f:
            f.write(binary)
        text = binary.rstrip(b"\0")
        kernels = ""
        if b".entry" in text and b".version" in text:  # PTX
            with open(stem + ".ptx", "wb") as f:
                f.write(text + b"\n")
            kernels = ",".join(m.decode() for m in re.findall(rb"\.entry\s+(\w+)", text))
        print(f"e{i:03d} {name} {len(binary)} bytes {kernels or '-'} {options_of(key)}")
    print(f"{kept} of {len(names)} entries written to {a.out_dir}", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
