// fp4cl-bench linear: times FP4 linear layers, each kernel first checked against the scalar
// reference, over a sweep of token counts.
//
//   fp4cl-bench linear -n 4096 -k 4096 --tokens 1,8,64,512 --scheme nvfp4-w4a16,nvfp4-w4a4
//   fp4cl-bench linear --preset qwen3-30b-a3b --kernel all          (the expert's FC1 and FC2)
//   fp4cl-bench linear -m 1 -n 2048 -k 768 --tune GEMV_TOKENS=8      (-m: one token count)
//
// Bytes per call are the prepared weights (codes and block scales), read once per call; flops are
// 2·m·n·k. Layers that fit in the last-level cache would be timed from the cache, so each row
// cycles through enough copies of the layer (different weights) to stream --rotate-mib between
// two uses of one copy.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench_commands.hpp"
#include "bench_context.hpp"
#include "bench_options.hpp"
#include "bench_run.hpp"
#include "common/formats.cl"
#include "fp4cl/error.hpp"
#include "fp4cl/linear.hpp"
#include "kernels/linear_kernel.hpp"
#include "presets.hpp"
#include "reference_checks.hpp"
#include "synthetic_data.hpp"
#include "tuning/tuning_database.hpp"

namespace fp4cl::bench {

namespace {

struct LinearArgs {
  RunOptions run;
  std::string preset;
  std::int64_t m = 0, n = 0, k = 0;
  std::string output = "bf16";
  std::vector<std::string> tune;  // NAME=VALUE
  int check_samples = 256;
};

struct LinearShape {
  std::string label;
  std::int64_t n, k;
};

std::vector<LinearShape> shapes_of(const LinearArgs& a) {
  if (!a.preset.empty()) {
    if (a.n || a.k) throw Error("give either --preset or -n/-k, not both");
    const ModelPreset p = find_preset(a.preset);
    return {{fmt::format("{} fc1 {}x{}", p.name, 2 * p.intermediate, p.hidden), 2 * p.intermediate, p.hidden},
            {fmt::format("{} fc2 {}x{}", p.name, p.hidden, p.intermediate), p.hidden, p.intermediate}};
  }
  const std::int64_t n = a.n ? a.n : 4096, k = a.k ? a.k : 4096;
  return {{fmt::format("{}x{}", n, k), n, k}};
}

std::map<std::string, long long> parse_tune(const std::vector<std::string>& items) {
  std::map<std::string, long long> out;
  for (const std::string& t : items) {
    const auto eq = t.find('=');
    std::size_t used = 0;
    long long v = 0;
    try {
      if (eq != std::string::npos && eq > 0) v = std::stoll(t.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (eq == std::string::npos || eq == 0 || used == 0 || used != t.size() - eq - 1)
      throw Error("--tune takes NAME=INTEGER, got '" + t + "'");
    out[t.substr(0, eq)] = v;
  }
  return out;
}

std::vector<float> widen(const std::vector<std::uint16_t>& bf16) {
  std::vector<float> out(bf16.size());
  for (std::size_t i = 0; i < bf16.size(); ++i) out[i] = bf16_to_float(bf16[i]);
  return out;
}

cl::Buffer device_buffer(const Context& ctx, cl_mem_flags flags, std::size_t bytes, const void* host) {
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), flags | (host ? CL_MEM_COPY_HOST_PTR : 0), std::max<std::size_t>(bytes, 1),
               const_cast<void*>(host), &err);
  if (err != CL_SUCCESS) throw Error("allocating a benchmark buffer", err);
  return b;
}

std::string reproduce(const LinearArgs& a, const LinearShape& s, const QuantScheme& scheme, const std::string& kernel,
                      std::int64_t tokens) {
  std::string cmd = command_prefix("linear");
  cmd += fmt::format(" -n {} -k {} --scheme {} --tokens {}", s.n, s.k, tuning::scheme_key(scheme), tokens);
  if (!kernel.empty()) cmd += " --kernel " + kernel;
  if (a.output != "bf16") cmd += " --output " + a.output;
  for (const std::string& t : a.tune) cmd += " --tune " + t;
  if (a.check_samples != 256) cmd += fmt::format(" --check-samples {}", a.check_samples);
  return cmd + common_command_options(a.run);
}

void run_linear(LinearArgs a) {
  if (a.m > 0) a.run.tokens = {a.m};
  if (a.output != "bf16" && a.output != "fp32") throw Error("--output must be bf16 or fp32, got '" + a.output + "'");
  const std::vector<LinearShape> shapes = shapes_of(a);
  const std::vector<QuantScheme> schemes = parse_schemes(a.run.schemes);
  const std::vector<std::string> kernels = resolve_kernels(a.run.kernels, linear_kernels().names(), "linear");
  const std::map<std::string, long long> tune = parse_tune(a.tune);
  const std::int64_t max_tokens = *std::max_element(a.run.tokens.begin(), a.run.tokens.end());

  Context ctx = bench_context();
  BenchRun run(ctx, "fp4cl-bench linear", shapes.size() * schemes.size() * kernels.size() * a.run.tokens.size(), a.run);
  const double rotation = rotation_bytes(ctx, a.run);
  for (const LinearShape& shape : shapes) {
    for (const QuantScheme& scheme : schemes) {
      for (const std::string& kernel : kernels) {
        LinearOptions options;
        options.max_tokens = max_tokens;
        options.kernel = kernel;
        options.tuning = tune;
        options.output = a.output == "bf16" ? OutputType::bf16 : OutputType::fp32;
        std::vector<Fp4Weight> weights{make_linear_weight(scheme.weight, shape.n, shape.k, 1)};
        std::vector<Linear> layers;
        try {
          layers.push_back(Linear::create(ctx, weights[0], scheme, options));
        } catch (const Error& e) {
          // `--kernel all` means every kernel that can serve the case; one named is an error.
          if (!expanded_from_all(a.run.kernels, kernel)) throw;
          std::fprintf(stderr, "fp4cl-bench: skipped kernel %s for %s %s: %s\n", kernel.c_str(), shape.label.c_str(),
                       tuning::scheme_key(scheme).c_str(), e.what());
          for (std::size_t i = 0; i < a.run.tokens.size(); ++i) run.skip();
          continue;
        }
        const std::size_t copies =
            copies_for_rotation(rotation, static_cast<double>(layers[0].weight_bytes()), 64);
        for (std::size_t c = 1; c < copies; ++c)
          layers.push_back(Linear::create(ctx, make_linear_weight(scheme.weight, shape.n, shape.k, c + 1), scheme,
                                          options));
        for (std::int64_t tokens : a.run.tokens) {
          const std::vector<std::uint16_t> x = make_activations(tokens, shape.k, 99 + static_cast<std::uint64_t>(tokens));
          Row row;
          row.op = "linear";
          row.shape = shape.label;
          row.scheme = tuning::scheme_key(scheme);
          row.kernel = layers[0].kernel_name(tokens);
          row.detail = layers[0].kernel_description(tokens);
          row.series = fmt::format("{} {} {}", shape.label, row.scheme, kernel.empty() ? "auto" : kernel);
          row.tokens = tokens;
          row.weight_bytes = static_cast<double>(layers[0].weight_bytes());
          row.flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(shape.n) * static_cast<double>(shape.k);
          row.command = reproduce(a, shape, scheme, kernel, tokens);
          if (a.run.no_check) {
            row.check = "skipped";
          } else {
            std::vector<float> y;
            if (options.output == OutputType::fp32) {
              layers[0].run(x, tokens, y);
            } else {
              std::vector<std::uint16_t> y16;
              layers[0].run(x, tokens, y16);
              y = widen(y16);
            }
            row.check = check_linear_output(scheme, weights[0], x, tokens, y, options.output == OutputType::bf16,
                                            a.check_samples);
          }
          const cl::Buffer xb = device_buffer(ctx, CL_MEM_READ_ONLY, x.size() * 2, x.data());
          const cl::Buffer yb = device_buffer(
              ctx, CL_MEM_READ_WRITE,
              static_cast<std::size_t>(tokens * shape.n) * (options.output == OutputType::bf16 ? 2 : 4), nullptr);
          row.timing = time_calls(ctx, row_warmup(a.run, copies), a.run.iters, [&](int i) {
            Linear& layer = layers[static_cast<std::size_t>(i) % copies];
            layer.enqueue(xb, yb, tokens);
            return layer.last_events();
          });
          if (a.run.launches) print_commands(row.series + fmt::format(" M={}", tokens), row.timing, {});
          run.add(std::move(row));
        }
      }
    }
  }
  run.finish();
}

}  // namespace

void register_linear(CLI::App& app) {
  auto a = std::make_shared<LinearArgs>();
  CLI::App* lin = app.add_subcommand("linear", "time FP4 linear layers (each kernel checked against the reference first)");
  add_run_options(lin, a->run, {1, 8, 64, 512}, {"nvfp4-w4a16"});
  lin->add_option("--preset", a->preset, "model preset: its expert's FC1 (2I x H) and FC2 (H x I) (" + preset_names() + ")");
  lin->add_option("-m", a->m, "one token count (same as --tokens M)")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24));
  lin->add_option("-n", a->n, "output features (default 4096)")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20));
  lin->add_option("-k", a->k, "input features, a multiple of the block size (default 4096)")
      ->check(CLI::Range(std::int64_t{16}, std::int64_t{1} << 20));
  lin->add_option("--output", a->output, "bf16 | fp32")->capture_default_str();
  lin->add_option("--tune", a->tune, "a tuning parameter NAME=VALUE (repeatable), e.g. GEMV_TOKENS=8");
  lin->add_option("--check-samples", a->check_samples, "random outputs checked against the reference")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  lin->callback([a] { run_linear(*a); });
}

}  // namespace fp4cl::bench
