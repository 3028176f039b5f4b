#include "moe_test_support.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "common/formats.cl"

namespace fp4cl::test {

namespace {

std::uint16_t bf16_bits(float v) { return static_cast<std::uint16_t>(float_to_bf16(v)); }

void fill_codes(std::vector<std::uint8_t>& packed, std::size_t bytes, std::mt19937_64& rng) {
  packed.resize(bytes);
  for (std::size_t i = 0; i < bytes; i += 8) {
    std::uint64_t r = rng();
    for (std::size_t j = i; j < std::min(bytes, i + 8); ++j, r >>= 8) packed[j] = static_cast<std::uint8_t>(r);
  }
}

// Block-scale bytes. NVFP4: exact data E4M3 in [0.5, 2] (at most 4 significant bits over two
// octaves), generic any normal E4M3 value. MXFP4 carries the magnitude a global scale would:
// exponents around 2^-center (±1 exact, ±4 generic).
void fill_scales(std::vector<std::uint8_t>& s, std::size_t n, WeightFormat f, Data data, int center,
                 std::mt19937_64& rng) {
  s.resize(n);
  const bool exact = data == Data::exact;
  int lo = 0, hi = 0;
  if (f == WeightFormat::nvfp4) {
    lo = exact ? 0x30 : 0x08;
    hi = exact ? 0x40 : 0x7E;
  } else {
    lo = 127 - center - (exact ? 1 : 4);
    hi = 127 - center + 1;
  }
  std::uniform_int_distribution<int> d(lo, hi);
  for (auto& b : s) b = static_cast<std::uint8_t>(d(rng));
}

// Pre-activations of a few units: a dot product of n terms grows as sqrt(n) (each term
// e2m1 × scale × x has an rms near 4), so the weights' global scale goes as 2^-exponent.
int magnitude_exponent(std::int64_t n) {
  return static_cast<int>(std::lround(std::log2(std::sqrt(static_cast<double>(n))))) + 1;
}

}  // namespace

Fp4Experts make_experts(const ExpertSpec& spec) {
  std::mt19937_64 rng(spec.seed);
  Fp4Experts ex;
  ex.format = spec.format;
  ex.num_experts = spec.experts;
  ex.hidden = spec.hidden;
  ex.intermediate = spec.intermediate;
  const auto E = static_cast<std::size_t>(spec.experts), H = static_cast<std::size_t>(spec.hidden),
             I = static_cast<std::size_t>(spec.intermediate), B = static_cast<std::size_t>(block_size(spec.format));
  fill_codes(ex.w13_packed, E * 2 * I * H / 2, rng);
  fill_codes(ex.w2_packed, E * H * I / 2, rng);
  const int h_exp = magnitude_exponent(spec.hidden), i_exp = magnitude_exponent(spec.intermediate);
  fill_scales(ex.w13_scales, E * 2 * I * H / B, spec.format, spec.data, h_exp, rng);
  fill_scales(ex.w2_scales, E * H * I / B, spec.format, spec.data, i_exp, rng);
  if (spec.format == WeightFormat::nvfp4) {
    std::uniform_real_distribution<float> generic(0.3f, 1.0f);
    std::vector<float> fc1_input, fc2_input;  // quant direction
    for (std::size_t e = 0; e < E; ++e) {
      const int i = static_cast<int>(e);
      if (spec.data == Data::exact) {
        // gate and up differ in every expert (by a factor of 2 or 4).
        ex.w13_global_scale.push_back(std::ldexp(1.0f, -h_exp - (i % 3)));
        ex.w13_global_scale.push_back(std::ldexp(1.0f, -h_exp + 1 - 2 * (i % 2)));
        ex.w2_global_scale.push_back(std::ldexp(1.0f, -i_exp - (i % 2)));
        // 3·2^k: a block with amax 2 gets the power-of-two block scale 2^(k+1) <= 256.
        fc1_input.push_back(3.0f * std::ldexp(1.0f, 6 + i % 3));
        fc2_input.push_back(std::ldexp(1.0f, 6 + i % 3));
      } else {
        ex.w13_global_scale.push_back(generic(rng) * std::ldexp(1.0f, -h_exp));
        ex.w13_global_scale.push_back(generic(rng) * std::ldexp(1.0f, -h_exp));
        ex.w2_global_scale.push_back(generic(rng) * std::ldexp(1.0f, -i_exp));
        fc1_input.push_back(generic(rng) * 1000.0f);
        fc2_input.push_back(generic(rng) * 200.0f);
      }
    }
    ex.set_input_scales_from_quant(std::move(fc1_input), std::move(fc2_input));
  } else {
    ex.w13_global_scale.assign(2 * E, 1.0f);
    ex.w2_global_scale.assign(E, 1.0f);
  }
  return ex;
}

std::vector<std::uint16_t> make_activations(std::int64_t tokens, std::int64_t hidden, Data data, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(tokens * hidden));
  std::uniform_int_distribution<int> grid(-16, 16), position(0, 15), sign(0, 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = bf16_bits(data == Data::exact ? static_cast<float>(grid(rng)) / 8.0f : normal(rng));
  if (data == Data::exact) {
    // Every 16-block holds a ±2: W4A4 then quantizes every block with the same scale, on a grid
    // coarse enough for an exact fp32 FC1 even at H = 2880.
    for (std::size_t b = 0; b < x.size(); b += 16) x[b + static_cast<std::size_t>(position(rng))] = bf16_bits(sign(rng) ? 2.0f : -2.0f);
  }
  return x;
}

std::vector<std::int32_t> make_ids(std::int64_t tokens, int top_k, std::int64_t num_experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> all(static_cast<std::size_t>(num_experts)), ids;
  std::iota(all.begin(), all.end(), 0);
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + top_k);
  }
  return ids;
}

std::vector<float> make_weights(std::int64_t tokens, int top_k, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(0.05f, 1.0f);
  std::vector<float> w(static_cast<std::size_t>(tokens * top_k));
  for (auto& v : w) v = d(rng);
  return w;
}

std::vector<float> make_logits(std::int64_t tokens, std::int64_t num_experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(static_cast<std::size_t>(tokens * num_experts));
  for (auto& v : l) v = d(rng);
  return l;
}

Context& test_context() {
  static Context ctx = Context::create();
  return ctx;
}

namespace {

template <typename T>
cl::Buffer device_copy(const std::vector<T>& v) {
  Context& ctx = test_context();
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE, std::max<std::size_t>(4, v.size() * sizeof(T)));
  if (!v.empty()) ctx.queue().enqueueWriteBuffer(b, CL_TRUE, 0, v.size() * sizeof(T), v.data());
  return b;
}

DeviceResult read_result(const cl::Buffer& out, MoeOutput output, std::size_t n, DeviceResult r) {
  Context& ctx = test_context();
  if (output == MoeOutput::bf16) {
    r.bf16.resize(n);
    if (n) ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * 2, r.bf16.data());
  } else {
    r.fp32.resize(n);
    if (n) ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * 4, r.fp32.data());
  }
  return r;
}

cl::Buffer output_buffer(MoeOutput output, std::size_t n) {
  // Filled with a pattern the layer must overwrite.
  if (output == MoeOutput::bf16) return device_copy(std::vector<std::uint16_t>(n, 0x7FC1));
  return device_copy(std::vector<float>(n, NAN));
}

}  // namespace

DeviceResult run_topk(MoeLayer& layer, MoeOutput output, const std::vector<std::uint16_t>& x,
                      const std::vector<std::int32_t>& ids, const std::vector<float>& weights, std::int64_t tokens) {
  const auto n = static_cast<std::size_t>(tokens * layer.hidden());
  const cl::Buffer xb = device_copy(x), ib = device_copy(ids), wb = device_copy(weights);
  const cl::Buffer out = output_buffer(output, n);
  DeviceResult r;
  r.call = layer.enqueue_topk(xb, ib, wb, out, tokens);
  r.stats = layer.finish(r.call);
  return read_result(out, output, n, std::move(r));
}

DeviceResult run_logits(MoeLayer& layer, MoeOutput output, const std::vector<std::uint16_t>& x,
                        const std::vector<float>& logits, std::int64_t tokens) {
  const auto n = static_cast<std::size_t>(tokens * layer.hidden());
  const cl::Buffer xb = device_copy(x), lb = device_copy(logits);
  const cl::Buffer out = output_buffer(output, n);
  DeviceResult r;
  r.call = layer.enqueue_logits(xb, lb, out, tokens);
  r.stats = layer.finish(r.call);
  return read_result(out, output, n, std::move(r));
}

::testing::AssertionResult matches_reference(const reference::MoeReferenceResult& ref, const DeviceResult& dev,
                                             MoeOutput output) {
  const std::size_t n = ref.value.size();
  const std::size_t got = output == MoeOutput::bf16 ? dev.bf16.size() : dev.fp32.size();
  if (got != n) return ::testing::AssertionFailure() << "device output has " << got << " values, expected " << n;
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < n; ++i) {
    const bool ok = output == MoeOutput::bf16 ? reference::accepts_bf16(ref, i, dev.bf16[i])
                                              : reference::accepts_fp32(ref, i, dev.fp32[i]);
    if (ok) continue;
    if (++bad <= 5) {
      const double d = output == MoeOutput::bf16 ? static_cast<double>(bf16_to_float(dev.bf16[i])) : dev.fp32[i];
      first += fmt::format("\n  out[{}, {}] = {} but the reference is {} ± {}", static_cast<std::int64_t>(i) / ref.hidden,
                           static_cast<std::int64_t>(i) % ref.hidden, d, ref.value[i], ref.bound[i]);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " outputs outside the reference bound:" << first;
}

::testing::AssertionResult topk_matches_reference_twice(MoeLayer& layer, const Fp4Experts& experts,
                                                        const MoeConfig& config, std::int64_t tokens,
                                                        std::uint64_t seed) {
  const int k = static_cast<int>(config.top_k);
  const auto x = make_activations(tokens, experts.hidden, Data::exact, seed);
  const auto ids = make_ids(tokens, k, experts.num_experts, seed + 1);
  const auto w = make_weights(tokens, k, seed + 2);
  const auto ref = reference::moe_reference(experts, reference_options(config), x,
                                            reference::routing_from_topk(ids, w, tokens, k));
  const DeviceResult first = run_topk(layer, config.output, x, ids, w, tokens);
  ::testing::AssertionResult close = matches_reference(ref, first, config.output);
  if (!close) return close;
  const DeviceResult again = run_topk(layer, config.output, x, ids, w, tokens);
  if (first.bf16 != again.bf16 || first.fp32 != again.fp32) return ::testing::AssertionFailure() << "a rerun differs";
  return ::testing::AssertionSuccess();
}

reference::MoeReferenceOptions reference_options(const MoeConfig& config) {
  reference::MoeReferenceOptions o;
  o.scheme = config.scheme;
  o.calibrated_fc2_input_scale = config.fc2_input_scale == MoeFc2InputScale::calibrated;
  o.expert_map = config.expert_map;
  o.activation = config.activation;
  return o;
}

double median_bound_ulps(const reference::MoeReferenceResult& ref) {
  std::vector<double> r;
  for (std::size_t i = 0; i < ref.value.size(); ++i) {
    const double v = std::fabs(ref.value[i]);
    if (v == 0 || !std::isfinite(v)) continue;
    int e = 0;
    std::frexp(v, &e);
    r.push_back(ref.bound[i] / std::ldexp(1.0, e - 8));  // BF16: 8 significant bits
  }
  if (r.empty()) return 0;
  std::nth_element(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2), r.end());
  return r[r.size() / 2];
}

bool built_with(const LogCapture& log, const std::string& file, const std::string& option) {
  for (const std::string& line : log.at(log::Level::debug))
    if (line.find("program " + file) != std::string::npos && line.find(option) != std::string::npos) return true;
  return false;
}

bool built_with_all(const LogCapture& log, const std::string& file, const std::vector<std::string>& options) {
  for (const std::string& line : log.at(log::Level::debug)) {
    if (line.find("program " + file) == std::string::npos) continue;
    if (std::all_of(options.begin(), options.end(),
                    [&](const std::string& o) { return line.find(o + " ") != std::string::npos; }))
      return true;
  }
  return false;
}

}  // namespace fp4cl::test
