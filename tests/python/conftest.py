"""pytest fixtures of the Python binding's tests: the binding on the build tree's library, the
`fp4cl` CLI, and checkpoints made by that CLI (a seeded synthetic Qwen3-MoE model, quantized in
every scheme and layout) once per session.

Environment (set by ctest, tests/python/CMakeLists.txt): FP4CL_LIBRARY (libfp4cl.so to test),
FP4CL_CLI (the fp4cl tool), PYTHONPATH containing python/ of the source tree.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))  # the binding, when run by hand
sys.path.insert(0, HERE)  # fp4_reference

# The synthetic model: small enough for PoCL on a 2-core machine, every size a multiple of the
# MXFP4 block (32) and more than one block per row.
MODEL = dict(layers=1, hidden=128, inter=64, experts=4, topk=2, heads=2, kv_heads=1, head_dim=64, vocab=64)
LINEAR = "model.layers.0.self_attn.q_proj"
MOE_PREFIX = "model.layers.0"

# (scheme, layout): every scheme in compressed-tensors, the NVFP4 ones in ModelOpt too (ModelOpt
# has no MXFP4 format).
CHECKPOINTS = [("nvfp4", "modelopt"), ("nvfp4a16", "modelopt"), ("nvfp4", "compressed-tensors"),
               ("nvfp4a16", "compressed-tensors"), ("mxfp4", "compressed-tensors"),
               ("mxfp4a16", "compressed-tensors")]
CHECKPOINT_IDS = [f"{s}-{l}" for s, l in CHECKPOINTS]


def cli_path():
    path = os.environ.get("FP4CL_CLI")
    if not path:
        pytest.skip("FP4CL_CLI is not set (ctest sets it to the build tree's fp4cl tool)")
    return path


def run_cli(*args):
    result = subprocess.run([cli_path(), *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, f"fp4cl {' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


class Checkpoints:
    """Quantized checkpoints of one synthetic BF16 model, made on first use."""

    def __init__(self, root):
        self.root = root
        self.source = os.path.join(root, "source")
        args = ["make-model", self.source, "--seed", 7]
        for key, value in MODEL.items():
            args += [f"--{key.replace('_', '-')}", value]
        run_cli(*args)
        self.made = {}

    def get(self, scheme, layout):
        key = (scheme, layout)
        if key not in self.made:
            out = os.path.join(self.root, f"{scheme}-{layout}")
            run_cli("quantize", self.source, out, "--scheme", scheme, "--layout", layout)
            self.made[key] = out
        return self.made[key]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    return Checkpoints(str(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="session")
def fp4cl():
    import fp4cl as module
    return module


@pytest.fixture(scope="session")
def context(fp4cl):
    with fp4cl.Context() as ctx:
        yield ctx


@pytest.fixture(scope="session", params=CHECKPOINTS, ids=CHECKPOINT_IDS)
def checkpoint(request, checkpoints):
    """(scheme, layout, directory) of each checkpoint in turn."""
    scheme, layout = request.param
    return scheme, layout, checkpoints.get(scheme, layout)
