// The W4A4 (NVFP4) epilogue uses the activations' stored dequant-direction scale: alpha =
// input_scale × global_scale, one fp32 product (vLLM's alpha = input_scale * weight_scale_2),
// while the activations are quantized with the quant-direction input_global_scale. A ModelOpt
// checkpoint stores input_scale; its quant direction is the fp32 reciprocal, and 1/(1/x) is not
// always x. These tests pick such an x, so that the old formula global_scale / input_global_scale
// gives a different fp32 alpha, and check that the layers and references use the stored value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/formats.cl"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "kernels/linear_kernel.hpp"
#include "layers/moe_weights.hpp"
#include "reference/linear_reference.hpp"
#include "reference/moe_reference.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr QuantScheme kNvW4A4{WeightFormat::nvfp4, Activations::fp4_dynamic};

std::uint32_t bits(float v) {
  std::uint32_t b = 0;
  std::memcpy(&b, &v, 4);
  return b;
}

// The first float from `start` upwards whose fp32 reciprocal does not invert back to it.
float non_involutive(float start) {
  float x = start;
  while (1.0f / (1.0f / x) == x) x = std::nextafter(x, INFINITY);
  return x;
}

// A dequant-direction input scale x (a calibrated amax of about 4) and a weight global scale g
// (the first from `global_start` up) for which the stored-value alpha fl(x·g) differs from the
// reciprocal-based fl(g / fl(1/x)).
struct Scales {
  float input_scale = 0, input_global_scale = 0, global_scale = 0;
  float alpha() const { return input_scale * global_scale; }
  float old_alpha() const {
    return static_cast<float>(static_cast<double>(global_scale) / static_cast<double>(input_global_scale));
  }
};
Scales distinguishing_scales(float global_start) {
  Scales s;
  s.input_scale = non_involutive(4.0f / 2688.0f);
  s.input_global_scale = 1.0f / s.input_scale;
  s.global_scale = global_start;
  while (bits(s.alpha()) == bits(s.old_alpha())) s.global_scale = std::nextafter(s.global_scale, INFINITY);
  return s;
}

// BF16 activations on the grid j/8 in [-2, 2] with a ±2 in every 16-block: every block gets the
// same E4M3 scale, and every fp32 dot product below is exact.
std::vector<std::uint16_t> grid_activations(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> grid(-16, 16), position(0, 15), sign(0, 1);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * cols));
  for (auto& v : x) v = static_cast<std::uint16_t>(float_to_bf16(static_cast<float>(grid(rng)) / 8.0f));
  for (std::size_t b = 0; b < x.size(); b += 16)
    x[b + static_cast<std::size_t>(position(rng))] =
        static_cast<std::uint16_t>(float_to_bf16(sign(rng) ? 2.0f : -2.0f));
  return x;
}

// Random codes with block scales of at most four significant bits in [0.5, 2] (E4M3 0x30..0x40).
void fill_fp4(std::vector<std::uint8_t>& packed, std::vector<std::uint8_t>& scales, std::size_t codes_bytes,
              std::size_t scale_bytes, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255), scale(0x30, 0x40);
  packed.resize(codes_bytes);
  for (auto& b : packed) b = static_cast<std::uint8_t>(byte(rng));
  scales.resize(scale_bytes);
  for (auto& b : scales) b = static_cast<std::uint8_t>(scale(rng));
}

TEST(ActivationScales, TheChosenScalesTellTheFormulasApart) {
  const Scales s = distinguishing_scales(0.1f);
  EXPECT_NE(bits(1.0f / s.input_global_scale), bits(s.input_scale)) << "1/(1/x) must differ from x";
  EXPECT_NE(bits(s.alpha()), bits(s.old_alpha()));
}

// The linear layer's fp32 output is fl(S × alpha) for an exact dot product S: bit for bit the
// stored-scale alpha, for every kernel.
TEST(ActivationScales, LinearEpilogueUsesTheStoredInputScale) {
  const Scales s = distinguishing_scales(0.37f / 2688.0f);
  std::mt19937 rng(11);
  Fp4Weight w;
  w.n = 48;   // a shape every kernel serves (mma: n % 16 == 0, k % 64 == 0)
  w.k = 128;
  fill_fp4(w.packed, w.scales, static_cast<std::size_t>(w.n * w.k / 2), static_cast<std::size_t>(w.n * w.k / 16), rng);
  w.global_scale = s.global_scale;
  w.input_scale = s.input_scale;
  w.input_global_scale = s.input_global_scale;

  const reference::LinearReference scaled(kNvW4A4, w, nullptr, 0);
  EXPECT_EQ(scaled.alpha(), static_cast<double>(s.alpha()));

  for (const std::int64_t m : {std::int64_t{3}, std::int64_t{48}}) {
    const std::vector<std::uint16_t> x = grid_activations(m, w.k, static_cast<std::uint32_t>(m));
    // The exact dot products: the same quantized activations with alpha = 1.
    Fp4Weight unit = w;
    unit.global_scale = 1.0f;
    unit.input_scale = 1.0f;
    const std::vector<reference::LinearOutput> sums = reference::LinearReference(kNvW4A4, unit, x.data(), m).all();
    for (const std::string& kernel : linear_kernels().names()) {
      LinearOptions o;
      o.kernel = kernel;
      o.output = OutputType::fp32;
      o.max_tokens = m;
      std::vector<float> y;
      Linear::create(shared_context(), w, kNvW4A4, o).run(x, m, y);
      ASSERT_EQ(y.size(), sums.size());
      std::size_t wrong = 0, differs_from_old = 0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        const double sum = sums[i].y;
        ASSERT_EQ(static_cast<double>(static_cast<float>(sum)), sum) << "the test needs exact fp32 sums";
        const float expected = static_cast<float>(sum * static_cast<double>(s.alpha()));
        const float old = static_cast<float>(sum * static_cast<double>(s.old_alpha()));
        wrong += bits(y[i]) != bits(expected);
        differs_from_old += bits(expected) != bits(old);
      }
      EXPECT_EQ(wrong, 0u) << kernel << ", m = " << m << ": outputs not fl(S × input_scale·global_scale)";
      EXPECT_GT(differs_from_old, 0u) << kernel << ", m = " << m << ": the data cannot tell the formulas apart";
    }
  }
}

Fp4Experts scaled_experts(const Scales& fc1, const Scales& fc2) {
  std::mt19937 rng(5);
  Fp4Experts ex;
  ex.num_experts = 2;
  ex.hidden = 64;
  ex.intermediate = 32;
  const auto E = static_cast<std::size_t>(ex.num_experts), H = static_cast<std::size_t>(ex.hidden),
             I = static_cast<std::size_t>(ex.intermediate);
  fill_fp4(ex.w13_packed, ex.w13_scales, E * 2 * I * H / 2, E * 2 * I * H / 16, rng);
  fill_fp4(ex.w2_packed, ex.w2_scales, E * H * I / 2, E * H * I / 16, rng);
  ex.w13_global_scale = {fc1.global_scale, fc1.global_scale * 2.0f, fc1.global_scale * 0.5f, fc1.global_scale};
  ex.w2_global_scale = {fc2.global_scale, fc2.global_scale * 4.0f};
  ex.w13_input_scale.assign(E, fc1.input_scale);
  ex.w13_input_global_scale.assign(E, fc1.input_global_scale);
  ex.w2_input_scale.assign(E, fc2.input_scale);
  ex.w2_input_global_scale.assign(E, fc2.input_global_scale);
  return ex;
}

MoeConfig calibrated_config() {
  MoeConfig c;
  c.scheme = kNvW4A4;
  c.top_k = 2;
  c.max_tokens = 8;
  c.fc2_input_scale = MoeFc2InputScale::calibrated;
  c.output = MoeOutput::fp32;
  return c;
}

template <typename T>
std::vector<T> read_buffer(const cl::Buffer& b, std::size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(shared_context().queue().enqueueReadBuffer(b, CL_TRUE, 0, n * sizeof(T), v.data()), CL_SUCCESS);
  return v;
}

// The MoE layer's per-expert factors: alpha = fl(input_scale × global_scale), times the power of
// two the kernels' scale decoding needs; the quant-direction scales go to the quantization.
TEST(ActivationScales, MoeFactorsUseTheStoredInputScales) {
  const Scales fc1 = distinguishing_scales(0.1f), fc2 = distinguishing_scales(0.3f);
  const Fp4Experts ex = scaled_experts(fc1, fc2);
  const MoeConfig config = calibrated_config();
  for (const int e2m1_exp : {0, -126}) {
    const MoeDeviceWeights w = upload_moe_weights(shared_context(), ex, config, {0, 1}, e2m1_exp, 1);
    const double unscale = std::ldexp(1.0, -(w.scale_exp + e2m1_exp));
    const auto f1 = read_buffer<float>(w.fc1_factor, 4), f2 = read_buffer<float>(w.fc2_factor, 2);
    const auto q1 = read_buffer<float>(w.fc1_input_scale, 2), q2 = read_buffer<float>(w.fc2_input_scale, 2);
    for (std::size_t e = 0; e < 2; ++e) {
      for (std::size_t shard = 0; shard < 2; ++shard) {
        const float alpha = ex.w13_input_scale[e] * ex.w13_global_scale[2 * e + shard];
        EXPECT_EQ(bits(f1[2 * e + shard]), bits(static_cast<float>(alpha * unscale))) << "expert " << e;
      }
      const float alpha2 = ex.w2_input_scale[e] * ex.w2_global_scale[e];
      EXPECT_EQ(bits(f2[e]), bits(static_cast<float>(alpha2 * unscale))) << "expert " << e;
      EXPECT_EQ(bits(q1[e]), bits(ex.w13_input_global_scale[e]));
      EXPECT_EQ(bits(q2[e]), bits(ex.w2_input_global_scale[e]));
    }
  }
}

// End to end: the same experts with input_scale x or fl(1/fl(1/x)) (both valid partners of the
// same input_global_scale) give different outputs, each within its own reference's bound.
TEST(ActivationScales, MoeOutputFollowsTheStoredInputScale) {
  // Global scales near 0.1: FC1 and FC2 outputs of order 1 with these activations and codes.
  const Scales s = distinguishing_scales(0.1f);
  const Fp4Experts stored = scaled_experts(s, s);
  Fp4Experts recomputed = stored;
  for (auto* v : {&recomputed.w13_input_scale, &recomputed.w2_input_scale})
    for (float& x : *v) x = 1.0f / (1.0f / x);
  ASSERT_NE(bits(recomputed.w13_input_scale[0]), bits(stored.w13_input_scale[0]));

  const MoeConfig config = calibrated_config();
  const std::int64_t T = 6;
  const std::vector<std::uint16_t> x = grid_activations(T, stored.hidden, 3);
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  for (std::int64_t t = 0; t < T; ++t) {
    ids.insert(ids.end(), {static_cast<std::int32_t>(t % 2), static_cast<std::int32_t>(1 - t % 2)});
    weights.insert(weights.end(), {0.75f, 0.25f});
  }
  const Context& ctx = shared_context();
  auto run = [&](const Fp4Experts& ex) {
    MoeLayer layer = MoeLayer::create(ctx, ex, config);
    cl::Buffer xb(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, x.size() * 2,
                  const_cast<std::uint16_t*>(x.data()));
    cl::Buffer ib(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, ids.size() * 4, ids.data());
    cl::Buffer wb(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, weights.size() * 4, weights.data());
    cl::Buffer out(ctx.opencl_context(), CL_MEM_READ_WRITE, x.size() * 4);
    layer.forward_topk(xb, ib, wb, out, T);
    return read_buffer<float>(out, x.size());
  };
  reference::MoeReferenceOptions ro;
  ro.scheme = kNvW4A4;
  ro.calibrated_fc2_input_scale = true;
  const reference::MoeRouting routing = reference::routing_from_topk(ids, weights, T, 2);
  std::vector<std::vector<float>> outputs;
  for (const Fp4Experts* ex : {&stored, static_cast<const Fp4Experts*>(&recomputed)}) {
    outputs.push_back(run(*ex));
    const reference::MoeReferenceResult ref = reference::moe_reference(*ex, ro, x, routing);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) bad += !reference::accepts_fp32(ref, i, outputs.back()[i]);
    EXPECT_EQ(bad, 0u) << (ex == &stored ? "stored" : "recomputed") << " input scales";
  }
  std::size_t differ = 0;
  for (std::size_t i = 0; i < x.size(); ++i) differ += bits(outputs[0][i]) != bits(outputs[1][i]);
  EXPECT_GT(differ, 0u) << "the layer's output does not depend on input_scale";
}

}  // namespace
}  // namespace fp4cl::test
