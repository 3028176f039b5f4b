#!/usr/bin/env bash
# Session 27, run A: in-FC1 routing of router logits on the H200 (router kernel vs FC1), the
# launch floor probe, then the GPU tests of MoE/routing/linear.
set -uo pipefail
T0=$(date +%s)
mkdir -p /tmp/v && echo libnvidia-opencl.so.1 > /tmp/v/nvidia.icd && export OCL_ICD_VENDORS=/tmp/v
. bench/gpu/common.sh
gpu_host_env .device-deps/debs
S=$OUT/summary.txt
left() { echo $(( 575 - ($(date +%s) - T0) )); }
echo "start $(date -u +%T) at $(git log --oneline -1 | cut -c1-7)" > $S
gpu_build $OUT || { echo "build failed" >> $S; tail -30 $OUT/build.log >> $S; exit 1; }
echo "built at +$(( $(date +%s) - T0 )) s" >> $S
$bench devices > $OUT/devices.txt 2>&1
for p in qwen3-30b-a3b mixtral-8x7b deepseek-v3; do
  [ $(left) -lt 120 ] && break
  timeout $(( $(left) - 100 )) $bench moe --preset $p --tokens 1,2,4,8 --scheme nvfp4-w4a16,nvfp4-w4a4 --router logits \
    --tiles "mma.route_logits=1;mma.route_logits=2" --iters 50 --warmup 3 > $OUT/router-$p.txt 2>&1
  echo "== $p rc $? at +$(( $(date +%s) - T0 )) s" >> $S
done
if cc -O2 bench/standalone/launch_floor.c -o /tmp/launch_floor -L/tmp/fp4cl-deps/usr/lib/x86_64-linux-gnu -lOpenCL 2>$OUT/lf.log; then
  timeout 60 /tmp/launch_floor 4150 100 > $OUT/launch_floor.txt 2>&1
  echo "floor rc $? at +$(( $(date +%s) - T0 )) s" >> $S
else echo "launch_floor build failed" >> $S; fi
(cd $build && timeout $(left) ctest -j8 --timeout 120 \
  -R "Moe|Mma|mma|Linear|BinaryCache|ProgramCache|Tuned|Capi|Rout" > $OUT/ctest.log 2>&1)
echo "ctest rc $? at +$(( $(date +%s) - T0 )) s" >> $S
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|SEGFAULT|Not Run" $OUT/ctest.log | tail -30 >> $S
echo "end +$(( $(date +%s) - T0 )) s" >> $S
