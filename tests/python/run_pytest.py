"""ctest's entry point of the Python binding tests: runs pytest on this folder, or exits with 77
(ctest SKIP_RETURN_CODE) and says why when pytest, numpy, ml_dtypes or safetensors is not installed
(tools/install-deps.sh installs them).

Usage: run_pytest.py [pytest arguments]   (FP4CL_LIBRARY and FP4CL_CLI come from the environment)
"""

import importlib.util
import os
import sys

missing = [m for m in ("pytest", "numpy", "ml_dtypes", "safetensors") if importlib.util.find_spec(m) is None]
if missing:
    print(f"SKIPPED: the Python binding tests need {', '.join(missing)} (run tools/install-deps.sh)")
    sys.exit(77)

import pytest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main([here, "-p", "no:cacheprovider", "-q", "-rs", *sys.argv[1:]]))
