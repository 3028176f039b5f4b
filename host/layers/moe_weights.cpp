#include "layers/moe_weights.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "cl/opencl_calls.hpp"
#include "common/formats.cl"
#include "kernels/moe_registry.hpp"
#include "prepare/fp4_mma_layout.hpp"
#include "prepare/fp4_split_layout.hpp"
#include "support/check.hpp"
#include "support/parallel.hpp"

namespace fp4cl {

namespace {

template <typename Vector>
cl::Buffer upload(const Context& ctx, const std::string& what, const Vector& data) {
  using T = typename Vector::value_type;
  const std::size_t bytes = data.size() * sizeof(T);
  if (data.empty()) {
    const T zero{};
    return allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof(T), &zero, fmt::format("MoE: {}", what));
  }
  return allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, data.data(), fmt::format("MoE: {}", what));
}

// The exponent of 2 applied to MXFP4 block scales: as close to undoing the E2M1 decode's
// 2^e2m1_exp as the layer's biased scale exponents [lo, hi] allow. Hard limits: every decoded
// scale is a normal fp32 number and no weight × scale product overflows. (Products of blocks
// scaled near 2^-127 may become subnormal: contributions below 2^-126, far under fp32 resolution.)
int mxfp4_scale_exp(const Fp4Experts& ex, int e2m1_exp) {
  unsigned lo = 255, hi = 0;
  for (const auto* v : {&ex.w13_scales, &ex.w2_scales}) {
    for (std::uint8_t b : *v) {
      lo = std::min<unsigned>(lo, b);
      hi = std::max<unsigned>(hi, b);
    }
  }
  const int min_e = static_cast<int>(lo), max_e = static_cast<int>(hi);
  const int s = mxfp4_decode_scale_exp(lo, hi, e2m1_exp);
  if (!mxfp4_decode_scale_exp_fits(lo, s, e2m1_exp))
    fail("MoE experts: MXFP4 block scales span 2^{} .. 2^{}, too wide for the kernels' fp32 arithmetic", min_e - 127,
         max_e - 127);
  return s;
}

// The fp16 bits of an E4M3 value (exact: 4 significant bits, exponents 2^-9 .. 2^8; NaN as fp16's
// quiet NaN, though the layer refuses NaN scales before it uploads any).
std::uint16_t e4m3_as_fp16_computed(std::uint8_t byte) {
  const std::uint16_t sign = (byte & 0x80u) ? 0x8000u : 0u;
  if ((byte & 0x7Fu) == 0x7Fu) return static_cast<std::uint16_t>(sign | 0x7E00u);
  const float v = e4m3_decode(byte);
  if (v == 0.0f) return sign;
  int e = 0;
  const double m = std::frexp(std::fabs(static_cast<double>(v)), &e);  // |v| = m · 2^e, m in [0.5, 1)
  const auto mantissa = static_cast<std::uint16_t>((m * 2.0 - 1.0) * 1024.0);
  return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>((e - 1 + 15) << 10) | mantissa);
}

// The same through a table of the 256 bytes (a layer converts every block scale: frexp per scale
// took 13 % of loading a qwen3-30b-a3b layer on PoCL).
std::uint16_t e4m3_as_fp16(std::uint8_t byte) {
  static const std::array<std::uint16_t, 256> table = [] {
    std::array<std::uint16_t, 256> t{};
    for (unsigned b = 0; b < 256; ++b) t[b] = e4m3_as_fp16_computed(static_cast<std::uint8_t>(b));
    return t;
  }();
  return table[byte];
}

// Rows [row0, row0 + rows) of every expert's [N, K] matrix in the interleaved layout: the
// 4-byte word of elements 8g..8g+7 of row r at ((e·groups + r/group)·K/8 + g)·group + r%group,
// its block scales alike (converted by `scale`); rows padded to a whole group (zero codes,
// scale `pad_scale`).
template <typename Scale>
struct Interleaved {
  std::vector<std::uint32_t> words;
  std::vector<Scale> scales;
};
template <typename Scale, typename Convert>
Interleaved<Scale> interleave_rows(const std::vector<std::uint8_t>& packed,
                                            const std::vector<std::uint8_t>& scales, std::int64_t E, std::int64_t N,
                                            std::int64_t row0, std::int64_t rows, std::int64_t K, std::int64_t block,
                                            std::int64_t group, std::uint8_t pad_scale, Convert scale) {
  const std::int64_t groups = (rows + group - 1) / group, words_per_row = K / 8, blocks = K / block;
  Interleaved<Scale> out;
  out.words.assign(static_cast<std::size_t>(E * groups * group * words_per_row), 0u);
  out.scales.assign(static_cast<std::size_t>(E * groups * group * blocks), scale(pad_scale));
  // Experts write disjoint parts: ranges of them on threads (parallel_ranges; no step can fail).
  const auto experts = [&](std::int64_t e_begin, std::int64_t e_end) {
    for (std::int64_t e = e_begin; e < e_end; ++e) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t src = e * N + row0 + r, g0 = e * groups + r / group, lane = r % group;
        const std::uint8_t* bytes = &packed[static_cast<std::size_t>(src * K / 2)];
        for (std::int64_t g = 0; g < words_per_row; ++g) {
          const std::uint8_t* b = bytes + 4 * g;
          out.words[static_cast<std::size_t>((g0 * words_per_row + g) * group + lane)] =
              static_cast<std::uint32_t>(b[0]) | static_cast<std::uint32_t>(b[1]) << 8 |
              static_cast<std::uint32_t>(b[2]) << 16 | static_cast<std::uint32_t>(b[3]) << 24;
        }
        for (std::int64_t k = 0; k < blocks; ++k)
          out.scales[static_cast<std::size_t>((g0 * blocks + k) * group + lane)] =
              scale(scales[static_cast<std::size_t>(src * blocks + k)]);
      }
    }
  };
  parallel_ranges(E, rows * K / 2, experts);
  return out;
}

float checked_factor(double v, const char* what, std::int64_t e) {
  const auto f = static_cast<float>(v);
  if (!std::isnormal(f)) fail("MoE expert {}: the {} factor {} is not a normal fp32 number", e, what, v);
  return f;
}

// alpha = input scale × global scale, one fp32 product, times `unscale` (a power of two: exact
// while the result stays normal, which checked_factor verifies).
float scaled_alpha(float input_scale, float global_scale, double unscale, const char* what, std::int64_t e) {
  const float alpha = input_scale * global_scale;
  if (!std::isnormal(alpha))
    fail("MoE expert {}: the {} alpha = input scale {} × global scale {} is not a normal fp32 number", e, what,
         input_scale, global_scale);
  return checked_factor(static_cast<double>(alpha) * unscale, what, e);
}

// One matrix (rows [row0, row0 + rows) of each expert) uploaded in the interleaved layout.
void upload_matrix(const Context& ctx, const char* what, const std::vector<std::uint8_t>& packed,
                   const std::vector<std::uint8_t>& scales, WeightFormat format, std::int64_t E, std::int64_t N,
                   std::int64_t row0, std::int64_t rows, std::int64_t K, std::int64_t group, std::uint8_t pad,
                   cl::Buffer& words, cl::Buffer& scale_buffer) {
  const std::int64_t block = block_size(format);
  if (format == WeightFormat::nvfp4) {
    const auto m = interleave_rows<std::uint16_t>(packed, scales, E, N, row0, rows, K, block, group, pad,
                                                  [](std::uint8_t b) { return e4m3_as_fp16(b); });
    words = upload(ctx, fmt::format("{} codes", what), m.words);
    scale_buffer = upload(ctx, fmt::format("{} block scales", what), m.scales);
  } else {
    const auto m = interleave_rows<std::uint8_t>(packed, scales, E, N, row0, rows, K, block, group, pad,
                                                 [](std::uint8_t b) { return b; });
    words = upload(ctx, fmt::format("{} codes", what), m.words);
    scale_buffer = upload(ctx, fmt::format("{} block scales", what), m.scales);
  }
}

}  // namespace

MoeDeviceWeights upload_moe_weights(const Context& ctx, const Fp4Experts& ex, const MoeConfig& config,
                                    const std::vector<std::int32_t>& expert_map, int e2m1_exp, int group,
                                    bool interleaved, bool split, bool mma) {
  const bool nv = ex.format == WeightFormat::nvfp4, w4a4 = !config.scheme.w4a16();
  const std::int64_t E = ex.num_experts, H = ex.hidden, I = ex.intermediate;
  MoeDeviceWeights w;
  // NVFP4: E4M3 scales lie in [2^-9, 448]; 2^119 (with the 2^-126 decode) keeps both ends normal.
  w.scale_exp = nv ? (e2m1_exp == -126 ? 119 : 0) : mxfp4_scale_exp(ex, e2m1_exp);
  const double unscale = std::ldexp(1.0, -(w.scale_exp + e2m1_exp));
  std::vector<float> fc1(static_cast<std::size_t>(2 * E)), fc2(static_cast<std::size_t>(E));
  std::vector<float> in1(static_cast<std::size_t>(E), 1.0f), in2(static_cast<std::size_t>(E), 1.0f);
  for (std::int64_t e = 0; e < E; ++e) {
    const auto i = static_cast<std::size_t>(e);
    // W4A4 NVFP4: alpha = gs_d(input) × gs_d(weight) as one fp32 product (vLLM's input_scale *
    // weight_scale_2), from the stored dequant-direction input scale; the quant-direction one
    // (in1, in2) quantizes the activations. The dynamic FC2 input has gs = 1 both ways.
    float in_d1 = 1.0f, in_d2 = 1.0f;
    if (nv && w4a4) {
      in1[i] = ex.w13_input_global_scale[i];
      in_d1 = ex.w13_input_scale[i];
      if (config.fc2_input_scale == MoeFc2InputScale::calibrated) {
        in2[i] = ex.w2_input_global_scale[i];
        in_d2 = ex.w2_input_scale[i];
      }
    }
    const float gate = nv ? ex.w13_global_scale[2 * i] : 1.0f, up = nv ? ex.w13_global_scale[2 * i + 1] : 1.0f;
    const float down = nv ? ex.w2_global_scale[i] : 1.0f;
    fc1[2 * i] = scaled_alpha(in_d1, gate, unscale, "FC1 gate", e);
    fc1[2 * i + 1] = scaled_alpha(in_d1, up, unscale, "FC1 up", e);
    fc2[i] = scaled_alpha(in_d2, down, unscale, "FC2", e);
  }
  // Padding rows decode to zero; their scale byte must still decode to a normal number.
  const std::uint8_t pad = nv ? 0 : *std::min_element(ex.w2_scales.begin(), ex.w2_scales.end());
  const std::int64_t block = block_size(ex.format);
  // One layout's gate, up and w2 uploaded into `out` (codes and scales of each), each part made
  // (`make(packed, scales, N, K, source)` lays out an [E, N, K] stack) and uploaded before the next
  // is made, so that one part's host copy at a time is held. FC1's gate and up are rows [0, I) and
  // [I, 2I) of each expert's 2I rows of w13, read in place. Returns the layout's FP4 bytes per expert.
  struct Part {
    const char *rows_name, *scales_name;
    const std::vector<std::uint8_t>&packed, &scales;
    std::int64_t N, K;
    SourceRows source;
  };
  const Part parts[3] = {{"w13 gate rows", "w13 gate scales", ex.w13_packed, ex.w13_scales, I, H, {I, 2 * I, 0}},
                         {"w13 up rows", "w13 up scales", ex.w13_packed, ex.w13_scales, I, H, {I, 2 * I, I}},
                         {"w2", "w2 scales", ex.w2_packed, ex.w2_scales, H, I, {}}};
  const auto upload_layout = [&](const char* name, const auto& make, const std::array<cl::Buffer*, 6>& out) {
    std::uint64_t bytes = 0;
    for (int p = 0; p < 3; ++p) {
      const Part& part = parts[p];
      const auto m = make(part.packed, part.scales, part.N, part.K, part.source);
      *out[2 * p] = upload(ctx, fmt::format("{} ({} layout)", part.rows_name, name), m.words);
      *out[2 * p + 1] = upload(ctx, fmt::format("{} ({} layout)", part.scales_name, name), m.scales);
      bytes += static_cast<std::uint64_t>(4 * m.words.size() + m.scales.size());
    }
    return bytes / static_cast<std::uint64_t>(E);
  };
  using Bytes = std::vector<std::uint8_t>;
  if (mma)
    w.mma_bytes_per_expert = upload_layout(
        "MMA",
        [&](const Bytes& packed, const Bytes& scales, std::int64_t N, std::int64_t K, const SourceRows& source) {
          return mma_layout(packed, scales, E * N, K, block, source);
        },
        {&w.mma_gate, &w.mma_gate_scales, &w.mma_up, &w.mma_up_scales, &w.mma_w2, &w.mma_w2_scales});
  if (split)
    w.split_bytes_per_expert = upload_layout(
        "split",
        [&](const Bytes& packed, const Bytes& scales, std::int64_t N, std::int64_t K, const SourceRows& source) {
          return split_layout(packed, scales, E, N, K, block, 0, source);
        },
        {&w.split_gate, &w.split_gate_scales, &w.split_up, &w.split_up_scales, &w.split_w2, &w.split_w2_scales});
  if (interleaved) {
  upload_matrix(ctx, "w13 (gate rows)", ex.w13_packed, ex.w13_scales, ex.format, E, 2 * I, 0, I, H, group, pad, w.gate,
                w.gate_scales);
  upload_matrix(ctx, "w13 (up rows)", ex.w13_packed, ex.w13_scales, ex.format, E, 2 * I, I, I, H, group, pad, w.up,
                w.up_scales);
  upload_matrix(ctx, "w2", ex.w2_packed, ex.w2_scales, ex.format, E, H, 0, H, I, group, pad, w.down, w.down_scales);
  }
  w.fc1_factor = upload(ctx, "the FC1 factors", fc1);
  w.fc2_factor = upload(ctx, "the FC2 factors", fc2);
  w.fc1_input_scale = upload(ctx, "the FC1 input scales", in1);
  w.fc2_input_scale = upload(ctx, "the FC2 input scales", in2);
  w.expert_map = upload(ctx, "the expert map", expert_map);
  // The biases, or one zero for kernels built without MOE_BIAS (they never read it).
  w.biases = !ex.w13_bias.empty();
  w.fc1_bias = upload(ctx, "the FC1 biases", w.biases ? ex.w13_bias : std::vector<float>{0.0f});
  w.fc2_bias = upload(ctx, "the FC2 biases", w.biases ? ex.w2_bias : std::vector<float>{0.0f});
  const std::uint64_t elements = static_cast<std::uint64_t>(3 * I * H);
  w.bytes_per_expert = elements / 2 + elements / static_cast<std::uint64_t>(block_size(ex.format)) * (nv ? 2u : 1u);
  return w;
}

}  // namespace fp4cl
