// fp4cl-bench quant: times the device quantizer (BF16 rows to NVFP4 / MXFP4 codes and block
// scales, kernels/quantize.cl), each output first compared bit for bit with the host reference
// quantization (fp4cl/formats.hpp).
//
//   fp4cl-bench quant --cols 2048 --tokens 1,8,64,512 --scheme nvfp4-w4a4,mxfp4-w4a4
//
// A row of `tokens` rows × `cols` columns. Bytes per call are what the kernel reads and writes
// (BF16 input, packed codes, scales); the weight format of each --scheme is the target format.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_commands.hpp"
#include "bench_context.hpp"
#include "bench_options.hpp"
#include "bench_run.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/quantize.hpp"
#include "synthetic_data.hpp"
#include "tuning/tuning_database.hpp"

namespace fp4cl::bench {

namespace {

struct QuantArgs {
  RunOptions run;
  std::int64_t cols = 2048;
  std::string layout = "linear";
};

cl::Buffer buffer(const Context& ctx, cl_mem_flags flags, std::size_t bytes, const void* host = nullptr) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), flags | (host ? CL_MEM_COPY_HOST_PTR : 0), std::max<std::size_t>(bytes, 1),
               const_cast<void*>(host), &err);
  if (err != CL_SUCCESS) throw Error("allocating a benchmark buffer", err);
  return b;
}

std::vector<std::uint8_t> read(const Context& ctx, const cl::Buffer& b, std::size_t bytes) {
  std::vector<std::uint8_t> out(bytes);
  const cl_int err = ctx.queue().enqueueReadBuffer(b, CL_TRUE, 0, bytes, out.data());
  if (err != CL_SUCCESS) throw Error("reading the quantizer's output back", err);
  return out;
}

// Bit-exact comparison with the host reference (the device quantizer's contract).
std::string check(const Context& ctx, Quantizer& q, const Fp4MatrixShape& shape, const std::vector<std::uint16_t>& x,
                  float gs) {
  const cl::Buffer in = buffer(ctx, CL_MEM_READ_ONLY, x.size() * 2, x.data());
  const cl::Buffer packed = buffer(ctx, CL_MEM_READ_WRITE, static_cast<std::size_t>(shape.packed_bytes()));
  const cl::Buffer scales = buffer(ctx, CL_MEM_READ_WRITE, static_cast<std::size_t>(shape.scale_bytes()));
  q.quantize(shape, in, gs, packed, scales).wait();
  const QuantizedRows ref = quantize(shape.format, x, shape.rows, shape.cols, gs);
  const std::vector<std::uint8_t> got = read(ctx, packed, static_cast<std::size_t>(shape.packed_bytes()));
  if (got != ref.packed) throw Error("check against the reference failed: the packed codes differ");
  std::vector<std::uint8_t> want_scales = ref.scales;
  if (shape.scale_layout == ScaleLayout::swizzled)
    want_scales = swizzle_scales(ref.scales, shape.rows, shape.scale_cols());
  if (read(ctx, scales, static_cast<std::size_t>(shape.scale_bytes())) != want_scales)
    throw Error("check against the reference failed: the block scales differ");
  return fmt::format("ok: {} codes and {} scales bit-exact", shape.rows * shape.cols, want_scales.size());
}

void run_quant(const QuantArgs& a) {
  if (!a.run.kernels.empty() && !(a.run.kernels.size() == 1 && a.run.kernels[0] == "quantize"))
    throw Error("quant has one kernel, 'quantize'; --kernel takes no other value");
  if (a.layout != "linear" && a.layout != "swizzled") throw Error("--layout must be linear or swizzled, got '" + a.layout + "'");
  const std::vector<QuantScheme> schemes = parse_schemes(a.run.schemes);
  Context ctx = bench_context();
  BenchRun run(ctx, "fp4cl-bench quant", schemes.size() * a.run.tokens.size(), a.run);
  Quantizer quantizer(ctx);
  for (const QuantScheme& scheme : schemes) {
    if (a.cols % block_size(scheme.weight) != 0)
      throw Error(fmt::format("--cols {} is not a multiple of the {} block size {}", a.cols,
                              to_string(scheme.weight), block_size(scheme.weight)));
    for (std::int64_t tokens : a.run.tokens) {
      Fp4MatrixShape shape;
      shape.format = scheme.weight;
      shape.scale_layout = a.layout == "linear" ? ScaleLayout::linear : ScaleLayout::swizzled;
      shape.rows = tokens;
      shape.cols = a.cols;
      const float gs = scheme.weight == WeightFormat::nvfp4 ? 448.0f * 6.0f / 4.0f : 1.0f;
      const std::vector<std::uint16_t> x = make_activations(tokens, a.cols, 7 + static_cast<std::uint64_t>(tokens));
      Row row;
      row.op = "quant";
      row.shape = fmt::format("{} cols, {} scales", a.cols, a.layout);
      row.scheme = to_string(scheme.weight);
      row.kernel = "quantize";
      row.detail = fmt::format("Quantizer: local size {}x{}, {} blocks per work-item", quantizer.options().local_size[0],
                               quantizer.options().local_size[1], quantizer.options().blocks_per_item);
      row.series = fmt::format("quant {} {}", a.cols, row.scheme);
      row.tokens = tokens;
      row.weight_bytes = static_cast<double>(x.size() * 2 + static_cast<std::size_t>(shape.packed_bytes() + shape.scale_bytes()));
      row.command = fmt::format("{} --cols {} --layout {} --scheme {} --tokens {}{}", command_prefix("quant"), a.cols,
                                a.layout, tuning::scheme_key(scheme), tokens, common_command_options(a.run));
      row.check = a.run.no_check ? "skipped" : check(ctx, quantizer, shape, x, gs);
      const cl::Buffer in = buffer(ctx, CL_MEM_READ_ONLY, x.size() * 2, x.data());
      const cl::Buffer packed = buffer(ctx, CL_MEM_READ_WRITE, static_cast<std::size_t>(shape.packed_bytes()));
      const cl::Buffer scales = buffer(ctx, CL_MEM_READ_WRITE, static_cast<std::size_t>(shape.scale_bytes()));
      row.timing = time_calls(ctx, row_warmup(a.run), a.run.iters, [&](int) {
        return std::vector<cl::Event>{quantizer.quantize(shape, in, gs, packed, scales)};
      });
      run.add(std::move(row));
    }
  }
  run.finish();
}

}  // namespace

void register_quant(CLI::App& app) {
  auto a = std::make_shared<QuantArgs>();
  CLI::App* q = app.add_subcommand("quant", "time the device quantizer (checked bit for bit against the reference)");
  add_run_options(q, a->run, {1, 8, 64, 512}, {"nvfp4-w4a4", "mxfp4-w4a4"});
  q->add_option("--cols", a->cols, "columns per row (a multiple of the block size)")
      ->check(CLI::Range(std::int64_t{16}, std::int64_t{1} << 22))
      ->capture_default_str();
  q->add_option("--layout", a->layout, "scale layout: linear | swizzled")->capture_default_str();
  q->callback([a] { run_quant(*a); });
}

}  // namespace fp4cl::bench
