#include "reference/moe_reference.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>

#include "common/formats.cl"
#include "common/quant_recipe.cl"
#include "layers/moe_experts_check.hpp"
#include "layers/moe_expert_map.hpp"
#include "reference/linear_reference.hpp"
#include "support/check.hpp"

namespace fp4cl::reference {

namespace {

constexpr double kU = 0x1p-24;        // fp32 unit roundoff
constexpr double kSlack = 0x1p-44;    // the reference's own fp64 rounding, relative to Σ|terms|
// An fp32 score's absolute error where it underflows: exp(-l) overflowing, a subnormal quotient, or
// a device that flushes subnormals to 0 all leave it within the smallest normal number.
constexpr double kScoreUnderflow = 0x1p-126;
// What the grouped router adds to the sum it renormalizes by (DeepSeek-V3's gate), as fp32.
constexpr double kRenormEpsilon = static_cast<double>(1e-20f);
constexpr int kMaxVariants = 4096;    // W4A4 blocks: variants enumerated before the coarse bound

double gamma(double n) { return n * kU / (1.0 - n * kU); }

// The rounding error of an inexact fp32 dot product of n terms: γ(n+4) relative to Σ|terms|
// (any order, with or without FMA, plus the factor's rounding and the final product), and an
// absolute 2^-149 per term for products that fall below the normal range after the kernels'
// power-of-two rescaling (at most 2^32 away from the real value).
double dot_rounding(std::int64_t n, double abs_sum) {
  const auto dn = static_cast<double>(n);
  return gamma(dn + 4) * abs_sum + abs_sum * kSlack + dn * 0x1p-117;
}

// v = odd × 2^result for a nonzero finite v.
int lowest_bit_exponent(double v) {
  int e = 0;
  const double m = std::frexp(std::fabs(v), &e);  // m in [0.5, 1)
  const auto i = static_cast<std::uint64_t>(std::ldexp(m, 53));
  return e - 53 + __builtin_ctzll(i);
}

bool is_float(double v) { return static_cast<double>(static_cast<float>(v)) == v; }

// A dot product's exact value, Σ|terms| and what decides whether fp32 evaluates it exactly.
// Terms are products of two numbers of at most 8 and 6 significant bits (always fp32
// significands), so exactness depends only on their range and alignment.
struct Dot {
  double sum = 0, abs_sum = 0;
  int min_q = INT_MAX;
  std::int64_t n = 0;

  void add(double a, int qa, double b, int qb) {
    ++n;
    const double t = a * b;
    if (t == 0) return;
    sum += t;
    abs_sum += std::fabs(t);
    min_q = std::min(min_q, qa + qb);
  }
  // Every term is a normal fp32 number with room for the kernels' power-of-two rescaling
  // (within 2^±32), a multiple of 2^min_q, and Σ|terms| < 2^(24+min_q): every partial sum in
  // every order is an fp32 number.
  bool exact() const {
    if (abs_sum == 0) return true;
    return min_q >= -90 && abs_sum <= 0x1p90 && abs_sum < std::ldexp(1.0, 24 + min_q);
  }
};

// Lowest-bit exponent of a value used in a product; zero values (whose terms are skipped) get
// a sentinel that keeps sums of two exponents in range.
constexpr int kZeroQ = 16000;
int q_of(double v) { return v == 0 ? kZeroQ : lowest_bit_exponent(v); }

// result = dot × factor evaluated in fp32, `factor` being the fp32 number the layer applies.
struct Scaled {
  double value, bound;
};
Scaled scale_dot(const Dot& d, float factor) {
  const double f = static_cast<double>(factor);
  const double value = d.sum * f;
  if (d.exact()) {
    // The fp64 sum is exact too, and so is its product with the factor when that fits a float.
    if (is_float(value)) return {value, 0.0};
    // Else only the final product's rounding.
    return {value, (gamma(1) + kSlack) * std::fabs(value)};
  }
  return {value, dot_rounding(d.n, d.abs_sum) * std::fabs(f)};
}

// The dequantized weights of one expert without global scales (e2m1 × block scale, exact in
// fp32), with the lowest-bit exponent of each, built on first use.
struct ExpertWeights {
  std::vector<float> w13, w2;         // [2I, H], [H, I]
  std::vector<std::int16_t> q13, q2;  // lowest-bit exponents (zero: a large sentinel)
};

void dequantize(const std::vector<std::uint8_t>& packed, const std::vector<std::uint8_t>& scales, WeightFormat format,
                std::int64_t e, std::int64_t rows, std::int64_t cols, std::vector<float>& w,
                std::vector<std::int16_t>& q) {
  const std::int64_t block = block_size(format);
  w.resize(static_cast<std::size_t>(rows * cols));
  q.resize(w.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t row = static_cast<std::size_t>(e * rows + r);
      const unsigned byte = packed[row * static_cast<std::size_t>(cols / 2) + static_cast<std::size_t>(c / 2)];
      const unsigned code = (c % 2 == 0) ? (byte & 15u) : (byte >> 4);
      const unsigned sb = scales[row * static_cast<std::size_t>(cols / block) + static_cast<std::size_t>(c / block)];
      const float s = format == WeightFormat::nvfp4 ? e4m3_decode(sb) : e8m0_decode(sb);
      const float v = e2m1_decode(code) * s;  // exact: 2 × 4 significant bits (E8M0: a power of two)
      const std::size_t i = static_cast<std::size_t>(r * cols + c);
      w[i] = v;
      q[i] = static_cast<std::int16_t>(v == 0 ? kZeroQ : lowest_bit_exponent(v));
    }
  }
}

// Quantizes one block of BF16 values with the shared recipe; returns the dequantized values
// without the global scale (e2m1 × block scale), as the kernels store them.
void quantize_block(const double* v, int n, WeightFormat format, float gs, double* deq) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = fp4cl_amax_step(amax, static_cast<float>(v[i]));
  if (format == WeightFormat::nvfp4) {
    const FP4CL_U32 sb = nvfp4_scale_byte(amax, gs);
    const float mult = nvfp4_multiplier(sb, gs), s = e4m3_decode(sb);
    for (int i = 0; i < n; ++i) deq[i] = static_cast<double>(e2m1_decode(fp4_encode_scaled(static_cast<float>(v[i]), mult)) * s);
  } else {
    const FP4CL_U32 sb = mxfp4_scale_byte(amax);
    const float mult = mxfp4_multiplier(sb);
    const double s = static_cast<double>(e8m0_decode(sb));
    for (int i = 0; i < n; ++i) deq[i] = e2m1_decode(fp4_encode_scaled(static_cast<float>(v[i]), mult)) * s;
  }
}

// The BF16 values a device may produce for a = value ± bound.
std::vector<double> bf16_candidates(double value, double bound, std::size_t limit) {
  const double lo = round_to_bf16(value - bound), hi = round_to_bf16(value + bound);
  std::vector<double> c{lo};
  while (c.back() < hi && c.size() <= limit) {
    const std::uint32_t bits = float_to_bf16(static_cast<float>(c.back()));
    // next BF16 value upwards (bits of a negative value count down)
    const std::uint32_t next = (bits & 0x8000u) ? ((bits & 0x7FFFu) == 0 ? 0x0001u : bits - 1u) : bits + 1u;
    c.push_back(static_cast<double>(bf16_to_float(next)));
  }
  return c;
}

// FC2 inputs of one (token, expert) pair: values A and the largest deviation d of the device's.
struct Fc2Input {
  std::vector<double> a, dev;
  std::vector<int> q;
};

struct State {
  const Fp4Experts& ex;
  const MoeReferenceOptions& opt;
  MoeReferenceResult& res;
  std::vector<ExpertWeights> cache;
  std::vector<bool> ready;

  const ExpertWeights& weights(std::int64_t e) {
    const auto i = static_cast<std::size_t>(e);
    if (!ready[i]) {
      dequantize(ex.w13_packed, ex.w13_scales, ex.format, e, 2 * ex.intermediate, ex.hidden, cache[i].w13, cache[i].q13);
      dequantize(ex.w2_packed, ex.w2_scales, ex.format, e, ex.hidden, ex.intermediate, cache[i].w2, cache[i].q2);
      ready[i] = true;
    }
    return cache[i];
  }
};

// The multiplier of a block whose amax is `amax` (it only grows as amax shrinks).
float block_multiplier(float amax, WeightFormat format, float gs) {
  return format == WeightFormat::nvfp4 ? nvfp4_multiplier(nvfp4_scale_byte(amax, gs), gs)
                                       : mxfp4_multiplier(mxfp4_scale_byte(amax));
}

// W4A4 FC2 input: quantize every block of the BF16 SwiGLU output, enumerating the roundings
// the device may have made.
void quantize_fc2_input(State& c, const std::vector<double>& a, std::vector<std::vector<double>>& cand, float gs,
                        Fc2Input& in) {
  const int block = block_size(c.ex.format);
  const auto I = static_cast<int>(a.size());
  in.a.assign(a.size(), 0.0);
  in.dev.assign(a.size(), 0.0);
  std::vector<double> v(static_cast<std::size_t>(block)), deq(static_cast<std::size_t>(block));
  for (int b0 = 0; b0 < I; b0 += block) {
    quantize_block(&a[static_cast<std::size_t>(b0)], block, c.ex.format, gs, &in.a[static_cast<std::size_t>(b0)]);
    // An element that can neither set the amax (its every candidate lies below the smallest
    // possible amax) nor quantize to anything but ±0 (even with the largest possible multiplier)
    // has no effect on the block: one candidate stands for all of its values.
    double amax_lo = 0;
    for (int i = 0; i < block; ++i) {
      const auto& ci = cand[static_cast<std::size_t>(b0 + i)];
      amax_lo = std::max(amax_lo, ci.front() <= 0 && ci.back() >= 0 ? 0.0 : std::min(std::fabs(ci.front()), std::fabs(ci.back())));
    }
    const double mult_max = block_multiplier(static_cast<float>(amax_lo), c.ex.format, gs);
    long long variants = 1;
    for (int i = 0; i < block; ++i) {
      auto& ci = cand[static_cast<std::size_t>(b0 + i)];
      const double largest = std::max(std::fabs(ci.front()), std::fabs(ci.back()));
      if (ci.size() > 1 && largest <= amax_lo && largest * mult_max <= 0.25) ci.assign(1, a[static_cast<std::size_t>(b0 + i)]);
      if (variants <= kMaxVariants) variants *= static_cast<long long>(ci.size());
    }
    if (variants == 1) continue;
    if (variants <= kMaxVariants) {
      for (long long k = 0; k < variants; ++k) {
        long long rest = k;
        for (int i = 0; i < block; ++i) {
          const auto& ci = cand[static_cast<std::size_t>(b0 + i)];
          v[static_cast<std::size_t>(i)] = ci[static_cast<std::size_t>(rest % static_cast<long long>(ci.size()))];
          rest /= static_cast<long long>(ci.size());
        }
        quantize_block(v.data(), block, c.ex.format, gs, deq.data());
        for (int i = 0; i < block; ++i) {
          const auto r = static_cast<std::size_t>(b0 + i);
          in.dev[r] = std::max(in.dev[r], std::fabs(deq[static_cast<std::size_t>(i)] - in.a[r]));
        }
      }
    } else {
      // Coarse: |deq(v) - v| <= one FP4 step at the block scale <= amax/3 (+ the E4M3 subnormal
      // step), for every variant v.
      ++c.res.fc2_blocks_coarse;
      double amax = 0;
      for (int i = 0; i < block; ++i) {
        const auto& ci = cand[static_cast<std::size_t>(b0 + i)];
        amax = std::max({amax, std::fabs(ci.front()), std::fabs(ci.back())});
      }
      const double qerr = amax / 3.0 + 0x1p-9 / static_cast<double>(gs);
      for (int i = 0; i < block; ++i) {
        const auto r = static_cast<std::size_t>(b0 + i);
        const double spread = std::max(std::fabs(cand[r].front() - a[r]), std::fabs(cand[r].back() - a[r]));
        in.dev[r] = std::fabs(in.a[r] - a[r]) + spread + qerr;
      }
    }
  }
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }
double silu_derivative(double g) {
  const double sigma = 1.0 / (1.0 + std::exp(-g));
  return sigma * (1.0 + g * (1.0 - sigma));
}

// a = act(g, u) of one row and its bound, from g ± e_g and u ± e_u (MoeActivation; the device's
// fp32 arithmetic as moe_act in kernels/moe_fp4_vec.cl).
struct Activated {
  double value, bound;
};
Activated activate(const MoeActivation& act, double g, double e_g, double u, double e_u) {
  double s = 0, e_s = 0;  // the gate's factor and its bound
  if (act.kind == MoeActivation::Kind::swiglu_clamped) {
    const double alpha = act.alpha, limit = act.limit;
    // The clamps are 1-Lipschitz: g and u keep their bounds. f(g) = g·σ(alpha·g) = silu(alpha·g)
    // / alpha: f' = silu'(alpha·g), |f''| <= alpha / 2.
    const double gc = std::min(g, limit);
    u = std::min(std::max(u, -limit), limit) + 1.0;
    e_u += kU * (std::fabs(u) + e_u);  // up + 1 in fp32
    s = silu(alpha * gc) / alpha;
    e_s = (std::fabs(silu_derivative(alpha * gc)) + 0.25 * alpha * e_g) * e_g +
          (16 + 2 * std::fabs(alpha * gc)) * kU * std::fabs(s) + 0x1p-120;
  } else {
    s = silu(g);
    // Taylor: |silu(g + d) - silu(g)| <= |silu'(g)|·|d| + max|silu''|/2 · d², max|silu''| = 1/2
    // (the local slope, not the global 1.1: far below zero silu is ~e^g and its error as small).
    e_s = (std::fabs(silu_derivative(g)) + 0.25 * e_g) * e_g + 16 * kU * std::fabs(s) + 0x1p-120;
  }
  const double av = s * u;
  const double e_prod = std::fabs(s) * e_u + std::fabs(u) * e_s + e_s * e_u;
  return {av, e_prod + kU * (std::fabs(av) + e_prod)};
}

// W4A16 (NVFP4 and MXFP4) on CPUs may multiply FC2's inputs on their integer grid (chunks of 8;
// README, Numerics): a chunk's grid step is 2^(E - 14), 2^E above its largest magnitude, here the
// largest any of its elements' BF16 candidates may take; an element all of whose candidates lie on
// that grid is exact under any smaller E too, any other may move by half a step.
void add_fc2_grid_deviation(const std::vector<std::vector<double>>& cand, std::vector<double>& dev) {
  for (std::size_t c = 0; c < cand.size(); c += 8) {
    const std::size_t end = std::min(cand.size(), c + 8);
    double largest = 0.0;
    bool finite = true;
    for (std::size_t r = c; r < end; ++r)
      for (const double v : cand[r]) {
        finite = finite && std::isfinite(v);
        largest = std::max(largest, std::fabs(v));
      }
    if (!finite || largest == 0.0) continue;
    int e = 0;
    std::frexp(largest, &e);
    e = std::max(e, -125);
    for (std::size_t r = c; r < end; ++r) {
      bool on_grid = true;
      for (const double v : cand[r]) {
        const double q = std::ldexp(v, 14 - e);
        on_grid = on_grid && q == std::floor(q);
      }
      if (!on_grid) dev[r] += std::ldexp(1.0, e - 15);
    }
  }
}

// One (token, expert) pair: y [H] and its bound.
void expert_forward(State& c, std::int64_t e, const std::vector<double>& x, std::vector<double>& y,
                    std::vector<double>& y_bound) {
  const Fp4Experts& ex = c.ex;
  const QuantScheme& s = c.opt.scheme;
  const std::int64_t H = ex.hidden, I = ex.intermediate;
  const int block = block_size(ex.format);
  const bool nv = ex.format == WeightFormat::nvfp4;
  const ExpertWeights& w = c.weights(e);
  const auto ei = static_cast<std::size_t>(e);

  // FC1 input, quantized with the quant-direction scale; the factor applied to each shard's dot
  // product is alpha = input_scale × global_scale, the fp32 product the layer uses (W4A4 NVFP4).
  std::vector<double> xin(x);
  float in_scale = 1.0f;  // dequant direction of the FC1 input's global scale
  if (!s.w4a16()) {
    const float gs = nv ? ex.w13_input_global_scale[ei] : 1.0f;
    for (std::int64_t b0 = 0; b0 < H; b0 += block) quantize_block(&x[static_cast<std::size_t>(b0)], block, ex.format, gs, &xin[static_cast<std::size_t>(b0)]);
    if (nv) in_scale = ex.w13_input_scale[ei];
  }
  std::vector<int> qx(xin.size());
  for (std::size_t i = 0; i < xin.size(); ++i) qx[i] = q_of(xin[i]);
  // W4A16 (NVFP4 and MXFP4) on CPUs may multiply the inputs on their integer grid (chunks of 16;
  // README, Numerics): each FC1 sum may then move by Σ |w| · |grid(x) - x|.
  const bool grid = s.w4a16();
  std::vector<double> xdev;
  if (grid) {
    xdev.resize(xin.size());
    w4a16_int_grid_values(xin.data(), H, 16, xdev.data());
    for (std::size_t i = 0; i < xin.size(); ++i) {
      const double d = std::fabs(xdev[i] - xin[i]);
      xdev[i] = std::isnan(d) ? 0.0 : d;
    }
  }

  // FC1 + SwiGLU, then the BF16 rounding of a.
  std::vector<double> a(static_cast<std::size_t>(I));
  std::vector<std::vector<double>> cand(static_cast<std::size_t>(I));
  for (std::int64_t r = 0; r < I; ++r) {
    Scaled h[2];
    for (int shard = 0; shard < 2; ++shard) {
      Dot d;
      double dev = 0;  // Σ |w| · |grid(x) - x|
      const std::size_t row = static_cast<std::size_t>((shard * I + r) * H);
      for (std::int64_t i = 0; i < H; ++i) d.add(xin[static_cast<std::size_t>(i)], qx[static_cast<std::size_t>(i)], w.w13[row + static_cast<std::size_t>(i)], w.q13[row + static_cast<std::size_t>(i)]);
      if (grid)
        for (std::size_t i = 0; i < xdev.size(); ++i) dev += xdev[i] * std::fabs(static_cast<double>(w.w13[row + i]));
      const float gsd = nv ? ex.w13_global_scale[2 * ei + static_cast<std::size_t>(shard)] : 1.0f;
      h[shard] = scale_dot(d, in_scale * gsd);
      if (dev > 0)  // as FC2's deviating inputs below
        h[shard].bound = (dev + dot_rounding(d.n, d.abs_sum + dev)) * std::fabs(static_cast<double>(in_scale * gsd));
      ++c.res.fc1_rows;
      if (d.exact()) ++c.res.fc1_rows_exact;
    }
    double g = h[0].value, u = h[1].value, e_g = h[0].bound, e_u = h[1].bound;
    if (!ex.w13_bias.empty()) {  // + the biases in fp32
      const std::size_t b = static_cast<std::size_t>(e * 2 * I + r);
      g += static_cast<double>(ex.w13_bias[b]);
      u += static_cast<double>(ex.w13_bias[b + static_cast<std::size_t>(I)]);
      e_g += kU * (std::fabs(g) + e_g);
      e_u += kU * (std::fabs(u) + e_u);
    }
    const Activated act = activate(c.opt.activation, g, e_g, u, e_u);
    const double av = act.value, e_a = act.bound;
    a[static_cast<std::size_t>(r)] = round_to_bf16(av);
    cand[static_cast<std::size_t>(r)] = bf16_candidates(av, e_a, static_cast<std::size_t>(kMaxVariants));
    ++c.res.swiglu_values;
    if (cand[static_cast<std::size_t>(r)].size() > 1) ++c.res.swiglu_ambiguous;
  }

  // FC2 input.
  Fc2Input in;
  float fc2_in_scale = 1.0f;  // dequant direction; the dynamic FC2 input has gs = 1 both ways
  if (s.w4a16()) {
    in.a = a;
    in.dev.resize(a.size());
    for (std::size_t r = 0; r < a.size(); ++r)
      in.dev[r] = std::max(std::fabs(cand[r].front() - a[r]), std::fabs(cand[r].back() - a[r]));
    if (grid) add_fc2_grid_deviation(cand, in.dev);
  } else {
    const bool calibrated = nv && c.opt.calibrated_fc2_input_scale;
    const float gs = calibrated ? ex.w2_input_global_scale[ei] : 1.0f;
    quantize_fc2_input(c, a, cand, gs, in);
    if (calibrated) fc2_in_scale = ex.w2_input_scale[ei];
  }
  in.q.resize(in.a.size());
  for (std::size_t r = 0; r < in.a.size(); ++r) in.q[r] = q_of(in.a[r]);

  // FC2.
  const float factor = fc2_in_scale * (nv ? ex.w2_global_scale[ei] : 1.0f);
  y.assign(static_cast<std::size_t>(H), 0.0);
  y_bound.assign(static_cast<std::size_t>(H), 0.0);
  for (std::int64_t n = 0; n < H; ++n) {
    Dot d;
    double dev = 0;  // Σ |deviation of the device's input| × |w|
    const std::size_t row = static_cast<std::size_t>(n * I);
    for (std::int64_t r = 0; r < I; ++r) {
      const auto ri = static_cast<std::size_t>(r);
      d.add(in.a[ri], in.q[ri], w.w2[row + ri], w.q2[row + ri]);
      dev += in.dev[ri] * std::fabs(static_cast<double>(w.w2[row + ri]));
    }
    Scaled out = scale_dot(d, factor);
    if (dev > 0) {
      // The device's inputs differ by up to in.dev: their exact dot differs by up to dev, and
      // its rounding error is bounded over the larger Σ|terms|.
      out.bound = (dev + dot_rounding(d.n, d.abs_sum + dev)) * std::fabs(static_cast<double>(factor));
    }
    if (!ex.w2_bias.empty()) {  // + the bias in fp32
      out.value += static_cast<double>(ex.w2_bias[static_cast<std::size_t>(e * H + n)]);
      out.bound += kU * (std::fabs(out.value) + out.bound);
    }
    y[static_cast<std::size_t>(n)] = out.value;
    y_bound[static_cast<std::size_t>(n)] = out.bound;
  }
}

}  // namespace

double round_to_bf16(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  int e = 0;
  std::frexp(v, &e);          // |v| = m × 2^e, m in [0.5, 1)
  const int q = std::max(e - 8, -133);  // 8 significant bits; BF16 subnormals step 2^-133
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);
  return std::fabs(r) > 0x1.FEp127 ? std::copysign(INFINITY, v) : r;
}

MoeRouting routing_from_topk(const std::vector<std::int32_t>& ids, const std::vector<float>& weights,
                             std::int64_t tokens, int top_k) {
  const auto n = static_cast<std::size_t>(tokens * top_k);
  if (ids.size() != n || weights.size() != n)
    fail("reference routing: {} ids and {} weights for {} tokens × k = {}", ids.size(), weights.size(), tokens, top_k);
  MoeRouting r;
  r.tokens = tokens;
  r.top_k = top_k;
  r.ids = ids;
  r.weights.assign(weights.begin(), weights.end());
  return r;
}

MoeRouting with_shared_experts(const MoeRouting& r, std::int32_t first, int shared) {
  if (shared < 0 || first < 0) fail("reference routing: {} shared experts from expert {}", shared, first);
  MoeRouting out = r;
  out.top_k = r.top_k + shared;
  out.ids.clear();
  out.weights.clear();
  for (std::int64_t t = 0; t < r.tokens; ++t) {
    const auto routed = static_cast<std::ptrdiff_t>(t * r.top_k);
    out.ids.insert(out.ids.end(), r.ids.begin() + routed, r.ids.begin() + routed + r.top_k);
    out.weights.insert(out.weights.end(), r.weights.begin() + routed, r.weights.begin() + routed + r.top_k);
    for (int j = 0; j < shared; ++j) {
      out.ids.push_back(first + j);
      out.weights.push_back(1.0);
    }
  }
  return out;
}

MoeRouting routing_from_logits(const std::vector<float>& logits, std::int64_t tokens, std::int64_t num_experts,
                               int top_k, bool renormalize) {
  if (logits.size() != static_cast<std::size_t>(tokens * num_experts))
    fail("reference routing: {} logits for {} tokens × {} experts", logits.size(), tokens, num_experts);
  if (top_k < 1 || top_k > num_experts) fail("reference routing: top_k = {} with {} experts", top_k, num_experts);
  MoeRouting r;
  r.tokens = tokens;
  r.top_k = top_k;
  double max_delta = 0;
  std::vector<std::int32_t> order(static_cast<std::size_t>(num_experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* l = &logits[static_cast<std::size_t>(t * num_experts)];
    float m = -INFINITY;
    for (std::int64_t e = 0; e < num_experts; ++e) m = std::fmax(m, l[e]);
    double sum = 0;
    for (std::int64_t e = 0; e < num_experts; ++e) {
      sum += std::exp(static_cast<double>(l[e]) - m);
      if (std::isfinite(l[e])) max_delta = std::max(max_delta, static_cast<double>(m) - l[e]);
    }
    std::iota(order.begin(), order.end(), 0);
    auto key = [&](std::int32_t e) { return std::isnan(l[e]) ? -INFINITY : l[e]; };
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return key(a) > key(b); });
    double psum = 0;
    std::vector<double> p(static_cast<std::size_t>(top_k));
    for (int s = 0; s < top_k; ++s) {
      const std::int32_t e = order[static_cast<std::size_t>(s)];
      r.ids.push_back(e);
      p[static_cast<std::size_t>(s)] = std::exp(static_cast<double>(l[e]) - m) / sum;
      psum += p[static_cast<std::size_t>(s)];
    }
    for (int s = 0; s < top_k; ++s) r.weights.push_back(renormalize ? p[static_cast<std::size_t>(s)] / psum : p[static_cast<std::size_t>(s)]);
  }
  // fp32 softmax: each exp(l - max) carries the subtraction's rounding (u·Δ) and 4 ulp; the sum
  // γ(E); the division 2.5 ulp; renormalization: γ(k) and another division.
  const double e_exp = kU * max_delta + 8 * kU;
  const double e_p = 2 * e_exp + gamma(static_cast<double>(num_experts)) + 5 * kU;
  const double e_w = renormalize ? 2 * e_p + gamma(top_k) + 5 * kU : e_p;
  r.weight_rel_error = e_w * 1.01;
  // An exp(l - max) that underflows: each probability within kScoreUnderflow (the sum is >= 1);
  // renormalized, divided by the k probabilities' sum, which holds the max's, 1 / sum >= 1 / E.
  const double e_abs = kScoreUnderflow * (renormalize ? (top_k + 1.0) * static_cast<double>(num_experts) : 1.0);
  r.weight_abs_error = 2 * e_abs;
  return r;
}

MoeRouting routing_from_logits(const std::vector<float>& logits, std::int64_t tokens, std::int64_t num_experts,
                               int top_k, bool renormalize, const MoeLogitRouting& routing) {
  if (!routing.unsupported.empty()) fail("reference routing: the router is not computable: {}", routing.unsupported);
  if (routing.plain_softmax()) return routing_from_logits(logits, tokens, num_experts, top_k, renormalize);
  if (logits.size() != static_cast<std::size_t>(tokens * num_experts))
    fail("reference routing: {} logits for {} tokens × {} experts", logits.size(), tokens, num_experts);
  check_moe_logit_routing(routing, num_experts, top_k);
  const bool sigmoid = routing.scoring == MoeLogitRouting::Scoring::sigmoid, bias = !routing.correction_bias.empty();
  const std::int64_t per_group = num_experts / routing.groups;
  MoeRouting r;
  r.tokens = tokens;
  r.top_k = top_k;
  // A device score's relative error: sigmoid, exp (4 ulp) over 1 + e^-l (1 rounding) and the
  // division (2.5 ulp); softmax as routing_from_logits' (the subtraction's rounding, exp, the sum,
  // the division), with Δ the largest finite distance below a row's max over all rows.
  auto row_max = [&](const float* l) {
    float m = -INFINITY;
    for (std::int64_t e = 0; e < num_experts; ++e) m = std::fmax(m, l[e]);
    return m;
  };
  double max_delta = 0;
  if (!sigmoid) {
    for (std::int64_t t = 0; t < tokens; ++t) {
      const float* l = &logits[static_cast<std::size_t>(t * num_experts)];
      const float m = row_max(l);
      for (std::int64_t e = 0; e < num_experts; ++e)
        if (std::isfinite(l[e])) max_delta = std::max(max_delta, static_cast<double>(m) - l[e]);
    }
  }
  const double e_score = sigmoid ? 8 * kU : 2 * (kU * max_delta + 8 * kU) + gamma(static_cast<double>(num_experts)) + 5 * kU;
  // (key desc, index asc): the device's order.
  auto ahead = [](const std::pair<double, std::int32_t>& a, const std::pair<double, std::int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::vector<double> sc(static_cast<std::size_t>(num_experts)), k(sc.size());  // a token's scores and keys
  std::vector<std::pair<double, std::int32_t>> ranked;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* l = &logits[static_cast<std::size_t>(t * num_experts)];
    if (sigmoid) {
      for (std::int64_t e = 0; e < num_experts; ++e) sc[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
    } else {
      const float m = row_max(l);
      double sum = 0;
      for (std::int64_t e = 0; e < num_experts; ++e) sum += sc[e] = std::exp(static_cast<double>(l[e]) - m);
      for (double& v : sc) v /= sum;
    }
    for (std::int64_t e = 0; e < num_experts; ++e) {
      const double c = sc[e] + (bias ? routing.correction_bias[static_cast<std::size_t>(e)] : 0.0);
      k[e] = std::isnan(c) ? -INFINITY : c;
    }
    // A key's device error: its score's (relative, and absolute where it underflows), and the bias
    // addition's rounding.
    auto key_error = [&](std::int64_t e) {
      return e_score * std::fabs(sc[e]) + kScoreUnderflow + (bias ? kU * std::fabs(k[e]) : 0.0);
    };
    std::vector<char> kept(static_cast<std::size_t>(routing.groups), 1);
    if (routing.groups > 1) {
      std::vector<std::pair<double, std::int32_t>> groups;
      std::vector<double> group_error;
      for (int g = 0; g < routing.groups; ++g) {
        std::vector<std::pair<double, std::int32_t>> members;
        for (std::int64_t j = 0; j < per_group; ++j)
          members.push_back({k[g * per_group + j], static_cast<std::int32_t>(g * per_group + j)});
        std::sort(members.begin(), members.end(), ahead);
        double v = members[0].first, err = key_error(members[0].second);
        if (bias) {
          v += members[1].first;
          err += key_error(members[1].second) + kU * std::fabs(v);
          if (std::isnan(v)) v = -INFINITY;
        }
        groups.push_back({v, g});
        group_error.push_back(err);
      }
      std::sort(groups.begin(), groups.end(), ahead);
      std::fill(kept.begin(), kept.end(), 0);
      for (int i = 0; i < routing.top_groups; ++i) kept[static_cast<std::size_t>(groups[i].second)] = 1;
      if (routing.top_groups < routing.groups) {
        const auto& a = groups[static_cast<std::size_t>(routing.top_groups - 1)];
        const auto& b = groups[static_cast<std::size_t>(routing.top_groups)];
        if (std::isfinite(a.first) && a.first - b.first <= group_error[a.second] + group_error[b.second]) r.ambiguous = true;
      }
    }
    ranked.clear();
    for (std::int64_t e = 0; e < num_experts; ++e)
      if (kept[static_cast<std::size_t>(e / per_group)]) ranked.push_back({k[e], static_cast<std::int32_t>(e)});
    std::sort(ranked.begin(), ranked.end(), ahead);
    const std::size_t decided = std::min(ranked.size() - 1, static_cast<std::size_t>(top_k));
    for (std::size_t i = 0; i < decided; ++i) {
      const auto& a = ranked[i];
      const auto& b = ranked[i + 1];
      if (std::isfinite(a.first) && a.first - b.first <= key_error(a.second) + key_error(b.second)) r.ambiguous = true;
    }
    double psum = 0;
    for (int s = 0; s < top_k; ++s) psum += sc[ranked[static_cast<std::size_t>(s)].second];
    for (int s = 0; s < top_k; ++s) {
      const std::int32_t e = ranked[static_cast<std::size_t>(s)].second;
      r.ids.push_back(e);
      r.weights.push_back((renormalize ? sc[e] / (psum + kRenormEpsilon) : sc[e]) * routing.scaling_factor);
    }
  }
  // Renormalization: γ(k), the epsilon's addition and a division; the scaling one rounding.
  const double e_w = (renormalize ? 2 * e_score + gamma(top_k) + 6 * kU : e_score) + kU;
  r.weight_rel_error = e_w * 1.01;
  // Scores that underflow, each within kScoreUnderflow: the weight's numerator moves by that, and
  // renormalized its denominator (at least the epsilon) by k times that, of a weight at most 1.
  const double e_abs = renormalize ? (top_k + 1.0) * kScoreUnderflow / kRenormEpsilon : kScoreUnderflow;
  r.weight_abs_error = 2 * e_abs * static_cast<double>(routing.scaling_factor);
  return r;
}

MoeReferenceResult moe_reference(const Fp4Experts& experts, const MoeReferenceOptions& options,
                                 const std::vector<std::uint16_t>& x_bf16, const MoeRouting& routing) {
  check_moe_experts(experts, options.scheme, options.calibrated_fc2_input_scale);
  check_moe_activation(options.activation);
  const std::vector<std::int32_t> map = resolve_expert_map(options.expert_map, experts.num_experts);
  const std::int64_t T = routing.tokens, H = experts.hidden, k = routing.top_k;
  if (x_bf16.size() != static_cast<std::size_t>(T * H)) fail("reference MoE: x has {} values, expected {} × {}", x_bf16.size(), T, H);
  const auto E_global = static_cast<std::int64_t>(map.size());

  MoeReferenceResult res;
  res.tokens = T;
  res.hidden = H;
  res.value.assign(static_cast<std::size_t>(T * H), 0.0);
  res.bound.assign(res.value.size(), 0.0);
  State c{experts, options, res, std::vector<ExpertWeights>(static_cast<std::size_t>(experts.num_experts)),
            std::vector<bool>(static_cast<std::size_t>(experts.num_experts), false)};

  std::vector<double> x(static_cast<std::size_t>(H)), y, yb;
  std::vector<double> abs_terms(static_cast<std::size_t>(H));
  const double ew = routing.weight_rel_error, ea = routing.weight_abs_error;
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < H; ++i) x[static_cast<std::size_t>(i)] = bf16_to_float(x_bf16[static_cast<std::size_t>(t * H + i)]);
    double* out = &res.value[static_cast<std::size_t>(t * H)];
    double* bound = &res.bound[static_cast<std::size_t>(t * H)];
    std::fill(abs_terms.begin(), abs_terms.end(), 0.0);
    for (std::int64_t s = 0; s < k; ++s) {
      const std::int32_t id = routing.ids[static_cast<std::size_t>(t * k + s)];
      if (id < 0 || id >= E_global) fail("topk_ids[{}, {}] = {} is outside [0, {})", t, s, id, E_global);
      const std::int32_t local = map[static_cast<std::size_t>(id)];
      if (local < 0) continue;
      const double wt = routing.weights[static_cast<std::size_t>(t * k + s)];
      expert_forward(c, local, x, y, yb);
      for (std::int64_t n = 0; n < H; ++n) {
        const auto ni = static_cast<std::size_t>(n);
        out[n] += wt * y[ni];
        // |w' y' - w y| <= |w'| |y' - y| + |w' - w| |y|, |w' - w| <= ew |w| + ea.
        bound[n] += (std::fabs(wt) * (1 + ew) + ea) * yb[ni] + (ew * std::fabs(wt) + ea) * std::fabs(y[ni]);
        abs_terms[ni] += (std::fabs(wt) * (1 + ew) + ea) * (std::fabs(y[ni]) + yb[ni]);
      }
    }
    // The top-k sum in fp32: k products and k additions.
    for (std::int64_t n = 0; n < H; ++n) bound[n] += (gamma(2.0 * static_cast<double>(k) + 2) + kSlack) * abs_terms[static_cast<std::size_t>(n)];
  }
  return res;
}

bool accepts_bf16(const MoeReferenceResult& ref, std::size_t i, std::uint16_t bits) {
  const double v = bf16_to_float(bits), value = ref.value[i], b = ref.bound[i];
  if (std::isnan(value)) return std::isnan(v);
  return round_to_bf16(value - b) <= v && v <= round_to_bf16(value + b);
}

bool accepts_fp32(const MoeReferenceResult& ref, std::size_t i, float device) {
  const double value = ref.value[i];
  if (std::isnan(value)) return std::isnan(device);
  return std::fabs(static_cast<double>(device) - value) <= ref.bound[i];
}

}  // namespace fp4cl::reference
