#!/usr/bin/env bash
# Every buffer allocation, program build and enqueue of the library must go through
# host/cl/opencl_calls (where faults are injected). Fails listing any call in host/ that does not.
set -euo pipefail
host_dir=${1:?usage: check_calls_wrapped.sh HOST_DIR}
pattern='\.enqueue[A-Z]|clEnqueue|clCreateBuffer|clBuildProgram|clCompileProgram|\.build\(|cl::Buffer[ (][^;]*opencl_context\(\)'
found=$(grep -rnE "$pattern" "$host_dir" --include='*.cpp' --include='*.hpp' |
        grep -v '/cl/opencl_calls\.cpp:' | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//' || true)
if [[ -n "$found" ]]; then
  echo "OpenCL calls that bypass host/cl/opencl_calls (fault injection cannot reach them):"
  echo "$found"
  exit 1
fi
# The check itself must see a bypass when there is one.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'void f(cl::CommandQueue& q) { q.enqueueNDRangeKernel(k, cl::NullRange, g, l); }\n' > "$probe/probe.cpp"
if ! grep -rqE "$pattern" "$probe"; then
  echo "the pattern does not catch a direct enqueueNDRangeKernel call"
  exit 1
fi
echo "every OpenCL allocation, build and enqueue in $host_dir goes through host/cl/opencl_calls"
