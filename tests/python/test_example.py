"""examples/run_layers.py, the binding's example program, on a checkpoint the fp4cl tool writes."""

import os
import subprocess
import sys

from conftest import HERE, LINEAR, MOE_PREFIX

EXAMPLE = os.path.join(HERE, "..", "..", "examples", "run_layers.py")


def test_example_runs_and_reports_each_step(checkpoints, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "python"))
    r = subprocess.run([sys.executable, EXAMPLE, checkpoints.get("nvfp4", "modelopt"), "3"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "libfp4cl 0.1." in out and f"linear nvfp4    {LINEAR}" in out
    assert f"moe    nvfp4    {MOE_PREFIX}.mlp.experts E=4" in out
    assert "model.layers.0.self_attn.k_proj: y (3, 64) bfloat16" in out  # the first linear layer in model order
    assert f"{MOE_PREFIX}.mlp.experts: out (3, 128) float32" in out
    assert "refused as expected: " in out and "outside [0, 4)" in out
    r = subprocess.run([sys.executable, EXAMPLE, str(tmp_path / "missing")], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "cannot open" in r.stderr and "missing" in r.stderr, r.stdout + r.stderr
