#!/usr/bin/env bash
# Compiles the tensor-core kernels (moe_mma.cl, linear_mma.cl) with FP4_MMA_PTX=1 for an NVIDIA GPU
# on a machine without one: `fp4cl kernel-source` -> clang-14 (OpenCL C 1.2, nvptx64) with libclc's
# builtins -> llc (PTX for sm_80) -> ptxas (sm_90; where the CUDA toolkit is installed). PoCL
# compiles only their portable emulation (FP4_MMA_PTX=0), so without this a session with no GPU
# cannot tell whether the PTX paths it touched still build. The build options below cover those
# kernels' #if branches: one-token, routed, sorted-tile and token-sum paths, W4A16 and W4A4, NVFP4
# and MXFP4, staged and direct activations, several row tiles a warp, FC1 routing router logits.
#
# This is clang, not NVIDIA's OpenCL compiler: a kernel that builds here may still fail there (the
# device run is the last word), and the register counts printed are clang's, not the driver's
# (bench/gpu/registers.sh reads those on a GPU). Two liberties for clang: `asm` spelled __asm__,
# and __OPENCL_VERSION__ defined (NVIDIA's compiler has both).
#
# Usage: tools/check-nvptx.sh FP4CL_TOOL [WORK_DIR]
#   FP4CL_TOOL  the built `fp4cl` executable (its kernel-source subcommand)
#   WORK_DIR    where the .ll, .ptx and logs go (default: a temporary folder, removed)
# Exit status: 0 every variant compiled; 1 one failed (its compiler output printed); 77 clang-14,
# llvm-14's llvm-link / opt / llc or libclc-14's nvptx64 library missing (ctest: skipped).
set -euo pipefail

tool=${1:?usage: tools/check-nvptx.sh FP4CL_TOOL [WORK_DIR]}
work=${2:-}
libclc=/usr/lib/clc/nvptx64--nvidiacl.bc
for t in clang-14 llvm-link-14 opt-14 llc-14; do
  command -v "$t" >/dev/null || { echo "check-nvptx: $t not found (Debian: clang-14, llvm-14); skipped"; exit 77; }
done
[ -f "$libclc" ] || { echo "check-nvptx: $libclc not found (Debian: libclc-14); skipped"; exit 77; }
ptxas=$(command -v ptxas || true)
[ -z "$ptxas" ] && [ -x /usr/local/cuda/bin/ptxas ] && ptxas=/usr/local/cuda/bin/ptxas
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

# name | file | build options (besides FP4_MMA_PTX=1). Routing options are a layer's
# moe_route_build: 128 experts, k 8, softmax top-k; 256 in 8 groups, DeepSeek-V3's gate.
softmax="-DROUTE_EXPERTS=128 -DROUTE_GROUPS=1 -DROUTE_TOP_GROUPS=1 -DROUTE_TOPK=8 -DROUTE_LOCAL=128 \
-DROUTE_SIGMOID=0 -DROUTE_BIAS=0 -DROUTE_LOGIT_KEYS=1"
gate="-DROUTE_EXPERTS=256 -DROUTE_GROUPS=8 -DROUTE_TOP_GROUPS=4 -DROUTE_TOPK=8 -DROUTE_LOCAL=256 \
-DROUTE_SIGMOID=1 -DROUTE_BIAS=1 -DROUTE_LOGIT_KEYS=0"
nv16="-DMOE_NVFP4=1 -DMOE_W4A4=0"
nv4="-DMOE_NVFP4=1 -DMOE_W4A4=1"
variants=(
  "fc1_pair_w4a16|moe_mma.cl|-DMMA_FC1=1 -DMMA_DIRECT=1 -DMMA_PER_PAIR=1 -DMMA_NT=1 -DMMA_RT=1 -DMMA_KSPLIT=4 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=8 $nv16"
  "fc1_pair_w4a16_logits|moe_mma.cl|-DMMA_FC1=1 -DMMA_DIRECT=1 -DMMA_PER_PAIR=1 -DMMA_NT=1 -DMMA_RT=1 -DMMA_KSPLIT=4 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=8 $nv16 -DMMA_ROUTE_LOGITS=1 $softmax"
  "fc1_pair_w4a4_gate|moe_mma.cl|-DMMA_FC1=1 -DMMA_PER_PAIR=1 -DMMA_HIDDEN=7168 -DMMA_ROW_LOOP=2 -DMMA_NT=1 -DMMA_RT=4 -DMMA_KSPLIT=1 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=4 $nv4 -DMMA_ROUTE_LOGITS=1 $gate"
  "fc1_routed_w4a16|moe_mma.cl|-DMMA_FC1=1 -DMMA_DIRECT=1 -DMMA_ROUTED=1 -DMMA_ROW_LOOP=2 -DMMA_NT=1 -DMMA_RT=2 -DMMA_KSPLIT=1 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=8 $nv16"
  "fc1_routed_w4a4_wide_logits|moe_mma.cl|-DMMA_FC1=1 -DMMA_ROUTED=1 -DMMA_HIDDEN=2048 -DMMA_ROUTE_TILE=4 -DMMA_NT=1 -DMMA_RT=2 -DMMA_MT=2 -DMMA_KSPLIT=1 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=8 $nv4 -DMMA_ROUTE_LOGITS=1 $softmax"
  "fc1_routed_mxfp4_gathered|moe_mma.cl|-DMMA_FC1=1 -DMMA_ROUTED=1 -DMMA_NT=1 -DMMA_RT=1 -DMMA_KSPLIT=2 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=4 -DMOE_W4A4=1"
  "fc1_tiles_staged|moe_mma.cl|-DMMA_FC1=1 -DMMA_NT=4 -DMMA_RT=2 -DMMA_KSPLIT=1 -DMMA_KSTAGE=2 -DMMA_STAGE=1 -DMMA_UNROLL=1 $nv4"
  "fc1_tiles_direct_wide|moe_mma.cl|-DMMA_FC1=1 -DMMA_DIRECT=1 -DMMA_NT=4 -DMMA_RT=1 -DMMA_MT=2 -DMMA_KSPLIT=1 -DMMA_KSTAGE=2 -DMMA_STAGE=0 -DMMA_UNROLL=8 $nv16"
  "fc2_pair_sum|moe_mma.cl|-DMMA_FC2=1 -DMMA_PER_PAIR=1 -DMMA_SUM=1 -DMOE_OUT_BF16=1 -DMMA_NT=1 -DMMA_RT=1 -DMMA_KSPLIT=2 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=8 $nv16"
  "fc2_routed_sum|moe_mma.cl|-DMMA_FC2=1 -DMMA_ROUTED=1 -DMMA_SUM=1 -DMOE_OUT_BF16=0 -DMMA_NT=1 -DMMA_RT=1 -DMMA_KSPLIT=2 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=4 $nv4"
  "fc2_token_sum|moe_mma.cl|-DMMA_FC2=1 -DMMA_TOKEN_SUM=1 -DMMA_TOPK=8 -DMMA_SUM=1 -DMOE_OUT_BF16=1 -DMMA_NT=1 -DMMA_RT=1 -DMMA_MT=4 -DMMA_KSPLIT=1 -DMMA_KSTAGE=4 -DMMA_STAGE=0 -DMMA_UNROLL=4 $nv4"
  "fc2_tiles_staged|moe_mma.cl|-DMMA_FC2=1 -DMMA_SUM=0 -DMMA_NT=4 -DMMA_RT=2 -DMMA_KSPLIT=1 -DMMA_KSTAGE=2 -DMMA_STAGE=1 -DMMA_UNROLL=1 $nv16"
  "linear_w4a16|linear_mma.cl|-DFP4CL_FORMAT_MXFP4=0 -DMMA_NT=1 -DMMA_RT=4 -DMMA_MT=1 -DMMA_KSPLIT=2 -DMMA_UNROLL=8"
  "linear_w4a4_quant|linear_mma.cl|-DFP4CL_FORMAT_MXFP4=0 -DMMA_NT=1 -DMMA_RT=4 -DMMA_MT=1 -DMMA_KSPLIT=2 -DMMA_UNROLL=4 -DMMA_X_QUANT=4 -DMMA_K=4096"
  "linear_mxfp4_prefill|linear_mma.cl|-DFP4CL_FORMAT_MXFP4=1 -DMMA_NT=4 -DMMA_RT=2 -DMMA_MT=2 -DMMA_KSPLIT=1 -DMMA_UNROLL=2"
)

for file in moe_mma.cl linear_mma.cl; do
  "$tool" kernel-source "$file" >"$work/$file" || { echo "check-nvptx: $tool kernel-source $file failed"; exit 1; }
done

failed=0
printf '%-30s %s\n' variant "sm_90 (clang's PTX through ptxas)"
for v in "${variants[@]}"; do
  IFS='|' read -r name file options <<<"$v"
  log="$work/$name.log"
  # shellcheck disable=SC2086  # the options are words
  if clang-14 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header \
      -Xclang -cl-ext=+cl_khr_fp16 -fgnu89-inline -O2 -D__OPENCL_VERSION__=120 -Dasm=__asm__ \
      -DFP4_MMA_PTX=1 $options -emit-llvm -c "$work/$file" -o "$work/$name.bc" >"$log" 2>&1 &&
    llvm-link-14 --only-needed "$work/$name.bc" "$libclc" -o "$work/$name.linked.bc" 2>>"$log.link" &&
    opt-14 -O2 "$work/$name.linked.bc" -o "$work/$name.opt.bc" >>"$log" 2>&1 &&
    llc-14 -march=nvptx64 -mcpu=sm_80 -mattr=+ptx70 "$work/$name.opt.bc" -o "$work/$name.ptx" >>"$log" 2>&1; then
    if [ -n "$ptxas" ]; then
      if "$ptxas" -arch=sm_90 -v "$work/$name.ptx" -o "$work/$name.cubin" >>"$log" 2>&1; then
        entry=$(grep -o '\.entry [a-z_0-9]*' "$work/$name.ptx" | head -1 | cut -d' ' -f2)
        printf '%-30s %s\n' "$name" "$(grep -A2 "Function properties for $entry\$" "$log" |
          grep -o 'Used [0-9]* registers.*' || echo built)"
      else
        printf '%-30s %s\n' "$name" "FAILED (ptxas)"
        failed=1
        cat "$log"
      fi
    else
      printf '%-30s %s\n' "$name" "PTX built (no ptxas: not assembled)"
    fi
  else
    printf '%-30s %s\n' "$name" "FAILED (clang)"
    failed=1
    grep -v "^$" "$log" | head -30
  fi
done
exit $failed
