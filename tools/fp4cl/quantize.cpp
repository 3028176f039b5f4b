// `fp4cl quantize IN OUT --scheme S --layout L`: writes an NVFP4/MXFP4 checkpoint (ModelOpt or
// compressed-tensors layout) from a BF16/F32 safetensors model.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "fp4cl/model_writer.hpp"
#include "progress.hpp"

namespace fp4cl::cli {

void register_quantize(CLI::App& app) {
  struct Args {
    std::string in, out, scheme, layout;
    std::vector<std::string> include, exclude;
    std::optional<float> input_amax;
    QuantizeOptions options;
    ModelOutputOptions output;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("quantize", "Quantize a BF16/F32 safetensors model into an FP4 checkpoint");
  cmd->add_option("IN", args->in, "Input model directory (config.json + safetensors)")->required();
  cmd->add_option("OUT", args->out, "Output checkpoint directory (must not exist or be empty)")->required();
  cmd->add_option("--scheme", args->scheme, "nvfp4 (W4A4), nvfp4a16, mxfp4 (W4A4) or mxfp4a16")->required();
  cmd->add_option("--layout", args->layout, "Checkpoint layout: modelopt (NVFP4 only) or compressed-tensors")
      ->required();
  cmd->add_option("--include", args->include,
                  "fnmatch pattern of modules to quantize (repeatable; default: *_proj)");
  cmd->add_option("--exclude", args->exclude, "fnmatch pattern of modules to keep unquantized (repeatable)");
  cmd->add_option("--input-amax", args->input_amax,
                  "NVFP4 W4A4: fixed activation amax for every input scale (default: calibrate on synthetic "
                  "activations)");
  cmd->add_option("--calib-rows", args->options.calibration_rows,
                  "Synthetic calibration rows per module input")
      ->capture_default_str();
  cmd->add_option("--calib-seed", args->options.calibration_seed,
                  "Seed of the synthetic calibration activations")
      ->capture_default_str();
  cmd->add_option("--max-shard-size", args->output.max_shard_bytes,
                  "Largest safetensors file (e.g. 5GB, 500MiB); larger checkpoints are sharded")
      ->transform(CLI::AsSizeValue(true))
      ->default_str("5GB");
  cmd->add_flag("--force", args->output.overwrite, "Replace OUT if it is an existing model directory");
  cmd->callback([args] {
    QuantizeOptions options = args->options;
    options.scheme = quant_scheme_from_name(args->scheme);
    options.layout = quant_producer_from_name(args->layout);
    if (!args->include.empty()) options.include = args->include;
    options.exclude = args->exclude;
    options.input_amax = args->input_amax;
    ProgressBar bar;
    ModelOutputOptions output = args->output;
    output.progress = bar.callback();
    const QuantizeSummary summary = quantize_model(args->in, args->out, options, output);
    bar.finish();
    std::string kept = "none";
    if (!summary.ignored.empty()) {
      const std::size_t shown = std::min<std::size_t>(summary.ignored.size(), 4);
      kept = fmt::format("{}{}", fmt::join(summary.ignored.begin(), summary.ignored.begin() + shown, ", "),
                         summary.ignored.size() > shown ? ", ..." : "");
    }
    fmt::print(
        "wrote {}: {} {} checkpoint; {} modules quantized; {} linear modules kept ({}); {} tensors copied\n",
        args->out, to_string(options.layout), options.scheme.name(), summary.quantized.size(),
        summary.ignored.size(), kept, summary.copied_tensors);
  });
}

}  // namespace fp4cl::cli
