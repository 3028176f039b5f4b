#!/usr/bin/env bash
# Installs what fp4cl needs on Debian 12 (run as root): the Debian packages that are missing, and
# the PyPI packages used by the interoperability tests. Safe to run again: it installs only what
# is missing and does nothing else when everything is there.
set -euo pipefail

debs=(cmake g++ make pkg-config python3 python3-pip ccache
      ocl-icd-opencl-dev opencl-clhpp-headers pocl-opencl-icd clinfo
      libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev
      clang-14 libclang-rt-14-dev  # libFuzzer and clang's sanitizer runtimes (tools/run-tests.sh)
      llvm-14 libclc-14)  # the PTX paths compiled without a GPU (tools/check-nvptx.sh)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "fp4cl: installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Interop tests compare with implementations no one here wrote (numpy, ml_dtypes, safetensors);
# pytest runs the Python binding's tests.
py=${PYTHON:-python3}
if ! "$py" -c 'import numpy, ml_dtypes, safetensors, pytest' 2>/dev/null; then
  echo "fp4cl: installing PyPI packages: numpy ml_dtypes safetensors pytest" >&2
  "$py" -m pip install -q numpy ml_dtypes safetensors pytest 2>/dev/null ||
    "$py" -m pip install -q --break-system-packages numpy ml_dtypes safetensors pytest
fi
