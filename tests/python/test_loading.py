"""How the binding finds libfp4cl: FP4CL_LIBRARY, else an install prefix's lib/ beside the
package, else the loader's path; and what it says when it cannot. Each case runs in a fresh
interpreter (a process loads the library once)."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HERE, LINEAR

SOURCE_PACKAGE = os.path.join(HERE, "..", "..", "python", "fp4cl")


def library():
    path = os.environ.get("FP4CL_LIBRARY")
    if not path:
        pytest.skip("FP4CL_LIBRARY is not set (ctest sets it to the build tree's libfp4cl.so)")
    return os.path.realpath(path)


def python(code, pythonpath, **env_changes):
    env = {k: v for k, v in os.environ.items() if k not in ("FP4CL_LIBRARY", "PYTHONPATH")}
    env.update(env_changes, PYTHONPATH=pythonpath)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/")


def test_installed_prefix_is_found_without_environment(tmp_path):
    # <prefix>/lib/libfp4cl.so.0.1 (what cmake --install writes) and the package under
    # <prefix>/lib/python3/site-packages/fp4cl.
    site = tmp_path / "lib" / "python3" / "site-packages"
    shutil.copytree(SOURCE_PACKAGE, site / "fp4cl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(library(), tmp_path / "lib" / "libfp4cl.so.0.1")
    r = python("import fp4cl; print(fp4cl.library_path()); print(fp4cl.library_version())", str(site))
    assert r.returncode == 0, r.stderr
    path, version = r.stdout.split()
    assert path == str(tmp_path / "lib" / "libfp4cl.so.0.1") and version.startswith("0.1.")


def test_cmake_install_of_library_and_binding(tmp_path, checkpoints):
    # cmake --install of the build tree: the package, found on PYTHONPATH, loads the installed
    # libfp4cl.so beside it and runs a layer, with no FP4CL_LIBRARY.
    build = os.environ.get("FP4CL_BUILD_DIR")
    if not build:
        pytest.skip("FP4CL_BUILD_DIR is not set (ctest sets it to the build tree)")
    r = subprocess.run(["cmake", "--install", build, "--prefix", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    sites = [os.path.dirname(p) for p in glob.glob(str(tmp_path / "**" / "site-packages" / "fp4cl"), recursive=True)]
    assert len(sites) == 1, sites
    code = ("import sys, fp4cl, numpy as np, ml_dtypes\n"
            "with fp4cl.Model(sys.argv[1]) as m, m.linear(sys.argv[2]) as l:\n"
            "    y = l.run(np.ones((2, l.k), ml_dtypes.bfloat16))\n"
            "    print(fp4cl.library_path(), y.shape, bool(y.astype(np.float32).any()))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("FP4CL_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = sites[0]
    r = subprocess.run([sys.executable, "-c", code, checkpoints.get("mxfp4", "compressed-tensors"), LINEAR],
                       env=env, capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr
    path, shape = r.stdout.split(" ", 1)
    assert path.startswith(str(tmp_path)) and os.path.basename(path) == "libfp4cl.so.0.1", r.stdout
    assert shape.strip().endswith("True"), r.stdout


def test_environment_variable_wins(tmp_path):
    r = python("import fp4cl; print(fp4cl.library_path())", os.path.dirname(SOURCE_PACKAGE), FP4CL_LIBRARY=library())
    assert r.returncode == 0 and r.stdout.strip() == library(), r.stderr


def test_missing_library_is_a_clear_error(tmp_path):
    code = ("import fp4cl\n"
            "try:\n    fp4cl.Context()\n"
            "except fp4cl.LibraryNotFoundError as e:\n    print('refused:', e)\n")
    r = python(code, os.path.dirname(SOURCE_PACKAGE), FP4CL_LIBRARY=str(tmp_path / "libfp4cl.so"))
    assert "refused: cannot load libfp4cl" in r.stdout and str(tmp_path) in r.stdout, r.stdout + r.stderr
    assert "FP4CL_LIBRARY" in r.stdout


def test_a_library_without_the_c_api_is_refused(tmp_path):
    # Any shared library that is not libfp4cl: libc.
    import ctypes.util
    libc = ctypes.util.find_library("c")
    code = ("import fp4cl\n"
            "try:\n    fp4cl.library_version()\n"
            "except fp4cl.LibraryNotFoundError as e:\n    print('refused:', e)\n")
    r = python(code, os.path.dirname(SOURCE_PACKAGE), FP4CL_LIBRARY=libc)
    assert "refused:" in r.stdout and "is not a libfp4cl" in r.stdout, r.stdout + r.stderr
