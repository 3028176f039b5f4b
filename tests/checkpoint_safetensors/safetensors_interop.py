#!/usr/bin/env python3
"""fp4cl's safetensors reader and writer against the official `safetensors` package.

Usage: safetensors_interop.py <path to safetensors_tool>

1. Files the package writes (numpy and ml_dtypes dtypes: bfloat16, float8_e4m3fn, ...) read
   identically by fp4cl: names, dtypes, shapes, bytes, metadata; also as a sharded directory
   with model.safetensors.index.json.
2. Files fp4cl writes load identically with the package, byte for byte the file the package
   itself writes; sharded output too.
3. Both parsers accept and refuse the same corrupted files (every truncation, every single-bit
   flip in the header) and agree on what the accepted ones hold.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import save, save_file

TOOL = sys.argv[1]

# The safetensors name of each numpy / ml_dtypes dtype (the format's spec).
DTYPE_NAMES = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.uint8): "U8",
    np.dtype(np.int8): "I8",
    np.dtype(np.int16): "I16",
    np.dtype(np.uint16): "U16",
    np.dtype(np.int32): "I32",
    np.dtype(np.uint32): "U32",
    np.dtype(np.int64): "I64",
    np.dtype(np.uint64): "U64",
    np.dtype(np.float16): "F16",
    np.dtype(np.float32): "F32",
    np.dtype(np.float64): "F64",
    np.dtype(np.complex64): "C64",
    np.dtype(ml_dtypes.bfloat16): "BF16",
    np.dtype(ml_dtypes.float8_e4m3fn): "F8_E4M3",
    np.dtype(ml_dtypes.float8_e5m2): "F8_E5M2",
    np.dtype(ml_dtypes.float8_e8m0fnu): "F8_E8M0",
}


def tool(*args, stdin=None):
    result = subprocess.run([TOOL, *args], input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"safetensors_tool {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def random_bits(rng, shape, dtype):
    """An array of `dtype` with random bit patterns (NaNs included: compared as bytes)."""
    dtype = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def sample_tensors(seed):
    rng = np.random.default_rng(seed)
    p = "model.layers.0.mlp.experts.3.gate_proj"
    return {
        f"{p}.weight": rng.integers(0, 256, (8, 16), dtype=np.uint8),  # packed FP4 pairs
        f"{p}.weight_scale": random_bits(rng, (8, 2), ml_dtypes.float8_e4m3fn),
        f"{p}.weight_scale_2": np.array(0.0123, dtype=np.float32),  # shape []
        f"{p}.input_global_scale": np.array([448.0], dtype=np.float32),
        "mx.weight_scale": random_bits(rng, (4, 1), ml_dtypes.float8_e8m0fnu),
        "embed_tokens": random_bits(rng, (5, 6), ml_dtypes.bfloat16),
        "f8_e5m2": random_bits(rng, (3,), ml_dtypes.float8_e5m2),
        "half": rng.standard_normal((2, 3)).astype(np.float16),
        "double": rng.standard_normal((3,)),
        "complex": (rng.standard_normal(2) + 1j * rng.standard_normal(2)).astype(np.complex64),
        "mask": rng.integers(0, 2, (7,)).astype(np.bool_),
        "i8": rng.integers(-128, 128, (5,), dtype=np.int8),
        "i16": rng.integers(-1000, 1000, (2, 2), dtype=np.int16),
        "u16": rng.integers(0, 65536, (3,), dtype=np.uint16),
        "i32": rng.integers(-(2**31), 2**31, (4,), dtype=np.int32),
        "u32": rng.integers(0, 2**32, (1,), dtype=np.uint32),
        "topk_ids": rng.integers(-(2**40), 2**40, (2, 3), dtype=np.int64),
        "u64": rng.integers(0, 2**63, (2,), dtype=np.uint64),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "ünïcode.名前": np.arange(3, dtype=np.int32),
    }


def expect_dump_matches(dumped, tensors, where):
    assert sorted(dumped) == sorted(tensors), f"{where}: names {sorted(dumped)} != {sorted(tensors)}"
    for name, array in tensors.items():
        got = dumped[name]
        assert got["dtype"] == DTYPE_NAMES[array.dtype], f"{where}: {name}: dtype {got['dtype']} for {array.dtype}"
        assert got["shape"] == list(array.shape), f"{where}: {name}: shape {got['shape']} != {array.shape}"
        assert got["hex"] == array.tobytes().hex(), f"{where}: {name}: bytes differ"


def check_fp4cl_reads_official_files(tmp):
    tensors = sample_tensors(1)
    metadata = {"format": "np", "note": "ünï"}
    path = os.path.join(tmp, "official.safetensors")
    save_file(tensors, path, metadata=metadata)
    dump = json.loads(tool("dump", path))
    expect_dump_matches(dump["tensors"], tensors, "official file")
    (shard,) = dump["shards"]
    assert shard["metadata"] == metadata, shard["metadata"]
    assert shard["data_offset"] % 8 == 0
    print(f"ok: fp4cl reads the package's file ({len(tensors)} tensors)")


def check_fp4cl_reads_official_shards(tmp):
    tensors = sample_tensors(2)
    model = os.path.join(tmp, "official_sharded")
    os.makedirs(model)
    names = sorted(tensors)
    groups = [names[0::3], names[1::3], names[2::3]]
    weight_map = {}
    for i, group in enumerate(groups):
        shard = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n] for n in group}, os.path.join(model, shard), metadata={"format": "np"})
        weight_map.update({n: shard for n in group})
    index = {"metadata": {"total_size": sum(a.nbytes for a in tensors.values())}, "weight_map": weight_map}
    with open(os.path.join(model, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    dump = json.loads(tool("dump", model))
    assert len(dump["shards"]) == 3
    expect_dump_matches(dump["tensors"], tensors, "official shards")
    print("ok: fp4cl reads the package's sharded model through its index")


def expect_official_load_matches(path, tensors, where):
    with open(path, "rb") as f:
        loaded = dict(deserialize(f.read()))
    assert sorted(loaded) == sorted(tensors), f"{where}: names differ"
    for name, array in tensors.items():
        info = loaded[name]
        assert info["dtype"] == DTYPE_NAMES[array.dtype], f"{where}: {name}: {info['dtype']}"
        assert list(info["shape"]) == list(array.shape), f"{where}: {name}: shape {info['shape']}"
        assert bytes(info["data"]) == array.tobytes(), f"{where}: {name}: bytes differ"
    # The numpy loader too, for the dtypes it maps (safetensors 0.8 maps no F8 dtype to numpy).
    with safe_open(path, framework="np") as f:
        for name, array in tensors.items():
            if DTYPE_NAMES[array.dtype].startswith("F8_"):
                continue
            got = f.get_tensor(name)
            assert got.dtype == array.dtype and got.shape == array.shape, f"{where}: {name}: {got.dtype} {got.shape}"
            assert got.tobytes() == array.tobytes(), f"{where}: {name}: numpy bytes differ"


def check_official_reads_fp4cl_files(tmp):
    tensors = sample_tensors(3)
    source = os.path.join(tmp, "source.safetensors")
    save_file(tensors, source, metadata={"format": "pt"})
    written = os.path.join(tmp, "fp4cl.safetensors")
    tool("copy", source, written)
    expect_official_load_matches(written, tensors, "fp4cl file")
    with safe_open(written, framework="np") as f:
        assert f.metadata() == {"format": "pt"}, f.metadata()
    with open(written, "rb") as f:
        ours = f.read()
    assert ours == save(tensors, metadata={"format": "pt"}), "fp4cl's file differs from the package's bytes"
    print("ok: the package reads fp4cl's file, identical to its own output byte for byte")

    out = os.path.join(tmp, "fp4cl_sharded")
    shards = json.loads(tool("copy-sharded", source, out, "200"))
    assert len(shards) > 1, shards
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        index = json.load(f)
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in tensors.values())
    assert sorted(index["weight_map"]) == sorted(tensors)
    assert sorted(set(index["weight_map"].values())) == shards
    for shard in shards:
        held = {n: tensors[n] for n, s in index["weight_map"].items() if s == shard}
        expect_official_load_matches(os.path.join(out, shard), held, shard)
    print(f"ok: the package reads fp4cl's {len(shards)} shards as its index says")


def official_verdict(data):
    try:
        return True, dict(deserialize(data))
    except Exception as e:  # the package raises SafetensorError and others: any refusal counts
        return False, str(e)


def check_both_refuse_the_same_corruptions(tmp):
    rng = np.random.default_rng(4)
    tensors = {
        "w.weight": rng.integers(0, 256, (2, 4), dtype=np.uint8),
        "w.weight_scale": random_bits(rng, (2, 1), ml_dtypes.float8_e4m3fn),
        "w.weight_scale_2": np.array(0.5, dtype=np.float32),
        "b": random_bits(rng, (3,), ml_dtypes.bfloat16),
        "ids": np.array([3, -4], dtype=np.int64),
    }
    original = save(tensors, metadata={"format": "pt"})
    header_end = 8 + struct.unpack("<Q", original[:8])[0]
    cases = [("cut %d" % n, original[:n]) for n in range(len(original))]
    for offset in range(header_end):
        for bit in range(8):
            flipped = bytearray(original)
            flipped[offset] ^= 1 << bit
            cases.append((f"flip {offset}.{bit}", bytes(flipped)))
    folder = os.path.join(tmp, "corrupt")
    os.makedirs(folder)
    paths = []
    for i, (_, data) in enumerate(cases):
        paths.append(os.path.join(folder, f"{i}.safetensors"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    lines = tool("check-many", stdin="\n".join(paths) + "\n").splitlines()
    assert len(lines) == len(cases)
    accepted = 0
    for (what, data), line in zip(cases, lines):
        ours = json.loads(line)
        theirs_ok, theirs = official_verdict(data)
        assert ours["ok"] == theirs_ok, (
            f"{what}: fp4cl {'accepts' if ours['ok'] else 'refuses (' + ours['error'] + ')'}, "
            f"the package {'accepts' if theirs_ok else 'refuses (' + theirs + ')'}")
        if not theirs_ok:
            assert ours["error"].startswith("safetensors file '"), ours["error"]
            continue
        accepted += 1
        assert sorted(ours["tensors"]) == sorted(theirs), f"{what}: names differ"
        for name, info in theirs.items():
            got = ours["tensors"][name]
            assert got["dtype"] == info["dtype"] and got["shape"] == list(info["shape"]), f"{what}: {name}"
            assert got["hex"] == bytes(info["data"]).hex(), f"{what}: {name}: bytes differ"
    print(f"ok: {len(cases)} corrupted files, both parsers agree ({accepted} accepted, "
          f"{len(cases) - accepted} refused)")


def main():
    with tempfile.TemporaryDirectory(prefix="fp4cl_safetensors_interop_") as tmp:
        check_fp4cl_reads_official_files(tmp)
        check_fp4cl_reads_official_shards(tmp)
        check_official_reads_fp4cl_files(tmp)
        check_both_refuse_the_same_corruptions(tmp)


if __name__ == "__main__":
    main()
