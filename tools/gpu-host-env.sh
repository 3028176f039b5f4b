#!/usr/bin/env bash
# For a build host without apt or root (e.g. a lent GPU machine with only cmake, g++ and the
# driver's libOpenCL): unpacks Debian packages downloaded elsewhere with
#   apt-get download opencl-clhpp-headers opencl-c-headers ocl-icd-opencl-dev ocl-icd-libopencl1 \
#     libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libgtest-dev googletest
# into a prefix, and prints the environment to build fp4cl against them. Usage:
#   eval "$(bash tools/gpu-host-env.sh DEB_DIR [PREFIX])"
# NVIDIA's driver ships libnvidia-opencl.so.1 but often no ICD file: one is written under the
# prefix and OCL_ICD_VENDORS points at it.
set -euo pipefail
deb_dir=${1:?usage: gpu-host-env.sh DEB_DIR [PREFIX]}
prefix=${2:-/tmp/fp4cl-deps}
mkdir -p "$prefix/icd"
for d in "$deb_dir"/*.deb; do dpkg -x "$d" "$prefix"; done
echo libnvidia-opencl.so.1 >"$prefix/icd/nvidia.icd"
cat <<ENV
export CMAKE_PREFIX_PATH="$prefix/usr"
export CPATH="$prefix/usr/include\${CPATH:+:\$CPATH}"
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OCL_ICD_VENDORS="$prefix/icd"
ENV
