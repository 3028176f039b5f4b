// BF16 activations read as fp32 vectors in OpenCL C. A BF16 number is the upper half of the fp32
// of the same value, so each conversion is a 16-bit shift and exact. For the kernels that read
// the caller's BF16 rows a vector at a time (common/formats.cl's bf16_to_float is the scalar
// form, shared with the host's C++; this file is OpenCL C only).
#ifndef FP4CL_COMMON_BF16_CL
#define FP4CL_COMMON_BF16_CL

// The 4 BF16 values at src.
inline float4 bf16x4(const __global ushort* src) { return as_float4(convert_uint4(vload4(0, src)) << 16); }

// The 16 BF16 values src[16i .. 16i + 15], in element order.
inline float16 bf16x16(const __global ushort* src, int i) { return as_float16(convert_uint16(vload16(i, src)) << 16); }

#endif  // FP4CL_COMMON_BF16_CL
