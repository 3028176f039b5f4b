#!/usr/bin/env bash
# Session 27, run B: the automatic route_logits (FC1 for chunks of <= 2 tokens) against the router
# kernel, deepseek-v3's gate, the routing tests on NVIDIA, then the rest of the GPU subset.
set -uo pipefail
T0=$(date +%s)
mkdir -p /tmp/v && echo libnvidia-opencl.so.1 > /tmp/v/nvidia.icd && export OCL_ICD_VENDORS=/tmp/v
. bench/gpu/common.sh
gpu_host_env .device-deps/debs
S=$OUT/summary.txt
left() { echo $(( ${DEADLINE:-440} - ($(date +%s) - T0) )); }
echo "start $(date -u +%T)" > $S
gpu_build $OUT || { echo "build failed" >> $S; tail -30 $OUT/build.log >> $S; exit 1; }
echo "built at +$(( $(date +%s) - T0 )) s" >> $S
(cd $build && timeout 120 ctest -j8 --timeout 100 -R "MoeMmaRouteLogits|MoeLogitRouting|MoeRouteKernels|RouterLogits" \
  > $OUT/ctest-route.log 2>&1)
echo "route ctest rc $? at +$(( $(date +%s) - T0 )) s" >> $S
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|SEGFAULT|Not Run" $OUT/ctest-route.log | tail -20 >> $S
for p in qwen3-30b-a3b deepseek-v3 mixtral-8x7b; do
  [ $(left) -lt 60 ] && break
  sch=nvfp4-w4a16,nvfp4-w4a4; [ $p = deepseek-v3 ] && sch=nvfp4-w4a16
  timeout $(( $(left) - 30 )) $bench moe --preset $p --tokens 1,2,3,4 --scheme $sch --router logits \
    --tiles "mma.route_logits=1;mma.route_logits=0" --iters 50 --warmup 3 > $OUT/auto-$p.txt 2>&1
  echo "== $p rc $? at +$(( $(date +%s) - T0 )) s" >> $S
  grep -E "^ *[0-9]+  moe" $OUT/auto-$p.txt | cut -c1-100 >> $S
done
if [ $(left) -gt 60 ]; then
  (cd $build && timeout $(( $(left) - 10 )) ctest -j8 --timeout 100 -I 820,1400 \
    -R "Moe|Mma|mma|Linear|BinaryCache|ProgramCache|Tuned|Capi|Rout" > $OUT/ctest.log 2>&1)
  echo "ctest rest rc $? at +$(( $(date +%s) - T0 )) s" >> $S
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|SEGFAULT|Not Run" $OUT/ctest.log | tail -20 >> $S
fi
echo "end +$(( $(date +%s) - T0 )) s" >> $S
