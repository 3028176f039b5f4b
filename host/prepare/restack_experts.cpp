// Stacks of experts made from other stacks.
#include "prepare/restack_experts.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "fp4cl/scheme.hpp"
#include "support/check.hpp"

namespace fp4cl::detail {

namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

// Appends field `b` to `a`: set in both or in neither.
template <typename T>
void append_field(std::vector<T>& a, const std::vector<T>& b, const char* field) {
  if (a.empty() != b.empty())
    fail("append_experts: {} is set in {} stack only (both or neither)", field,
         a.empty() ? "the appended" : "the first");
  a.insert(a.end(), b.begin(), b.end());
}

// Rows [r0, r0 + rows) of the [total rows, cols] matrix at m, appended to out.
template <typename T>
void append_rows(std::vector<T>& out, const T* m, std::int64_t cols, std::int64_t r0, std::int64_t rows) {
  out.insert(out.end(), m + r0 * cols, m + (r0 + rows) * cols);
}

// Columns [c0, c0 + n) of every row of the [rows, cols] matrix at m, appended to out.
template <typename T>
void append_columns(std::vector<T>& out, const T* m, std::int64_t rows, std::int64_t cols, std::int64_t c0,
                    std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r) out.insert(out.end(), m + r * cols + c0, m + r * cols + c0 + n);
}

}  // namespace

void append_experts(Fp4Experts& into, const Fp4Experts& more) {
  if (into.format != more.format || into.hidden != more.hidden || into.intermediate != more.intermediate)
    fail("append_experts: experts of {} H {} I {} cannot follow experts of {} H {} I {}", to_string(more.format),
         more.hidden, more.intermediate, to_string(into.format), into.hidden, into.intermediate);
  append_field(into.w13_packed, more.w13_packed, "w13_packed");
  append_field(into.w13_scales, more.w13_scales, "w13_scales");
  append_field(into.w2_packed, more.w2_packed, "w2_packed");
  append_field(into.w2_scales, more.w2_scales, "w2_scales");
  append_field(into.w13_global_scale, more.w13_global_scale, "w13_global_scale");
  append_field(into.w2_global_scale, more.w2_global_scale, "w2_global_scale");
  append_field(into.w13_input_global_scale, more.w13_input_global_scale, "w13_input_global_scale");
  append_field(into.w2_input_global_scale, more.w2_input_global_scale, "w2_input_global_scale");
  append_field(into.w13_input_scale, more.w13_input_scale, "w13_input_scale");
  append_field(into.w2_input_scale, more.w2_input_scale, "w2_input_scale");
  append_field(into.w13_bias, more.w13_bias, "the FC1 bias (w13_bias)");
  append_field(into.w2_bias, more.w2_bias, "the FC2 bias (w2_bias)");
  into.num_experts += more.num_experts;
}

Fp4Experts split_intermediate(const Fp4Experts& wide, std::int64_t parts) {
  const std::int64_t block = block_size(wide.format), H = wide.hidden, wide_i = wide.intermediate;
  if (parts < 1 || wide_i % parts != 0 || (wide_i / parts) % block != 0)
    fail("split_intermediate: an intermediate size of {} does not split into {} parts of whole {}-element blocks",
         wide_i, parts, block);
  const std::int64_t I = wide_i / parts;
  Fp4Experts out;
  out.format = wide.format;
  out.num_experts = wide.num_experts * parts;
  out.hidden = H;
  out.intermediate = I;
  for (std::int64_t e = 0; e < wide.num_experts; ++e) {
    // w13 [2·P·I, H/2] (gate rows, then up rows), w2 [H, P·I/2], scales alike.
    const std::uint8_t* w13 = wide.w13_packed.data() + sz(e * 2 * wide_i * H / 2);
    const std::uint8_t* s13 = wide.w13_scales.data() + sz(e * 2 * wide_i * (H / block));
    const std::uint8_t* w2 = wide.w2_packed.data() + sz(e * H * wide_i / 2);
    const std::uint8_t* s2 = wide.w2_scales.data() + sz(e * H * (wide_i / block));
    for (std::int64_t j = 0; j < parts; ++j) {
      for (std::int64_t half = 0; half < 2; ++half) {  // gate, up
        append_rows(out.w13_packed, w13, H / 2, half * wide_i + j * I, I);
        append_rows(out.w13_scales, s13, H / block, half * wide_i + j * I, I);
      }
      append_columns(out.w2_packed, w2, H, wide_i / 2, j * I / 2, I / 2);
      append_columns(out.w2_scales, s2, H, wide_i / block, j * I / block, I / block);
      out.w13_global_scale.push_back(wide.w13_global_scale[sz(2 * e)]);
      out.w13_global_scale.push_back(wide.w13_global_scale[sz(2 * e + 1)]);
      out.w2_global_scale.push_back(wide.w2_global_scale[sz(e)]);
      for (const auto& [to, from] : {std::pair{&out.w13_input_global_scale, &wide.w13_input_global_scale},
                                     std::pair{&out.w2_input_global_scale, &wide.w2_input_global_scale},
                                     std::pair{&out.w13_input_scale, &wide.w13_input_scale},
                                     std::pair{&out.w2_input_scale, &wide.w2_input_scale}}) {
        if (!from->empty()) to->push_back((*from)[sz(e)]);
      }
      if (!wide.w13_bias.empty()) {
        for (std::int64_t half = 0; half < 2; ++half)
          append_rows(out.w13_bias, wide.w13_bias.data() + e * 2 * wide_i, 1, half * wide_i + j * I, I);
        const float* b2 = wide.w2_bias.data() + e * H;
        if (j == 0)
          out.w2_bias.insert(out.w2_bias.end(), b2, b2 + H);
        else
          out.w2_bias.insert(out.w2_bias.end(), sz(H), 0.0f);
      }
    }
  }
  return out;
}

}  // namespace fp4cl::detail
