// `fp4cl make-model OUT`: writes a seeded synthetic Qwen3-MoE model (BF16 or F32 safetensors and
// config.json) to quantize and load in tests and benchmarks.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <string>

#include "commands.hpp"
#include "fp4cl/model_writer.hpp"
#include "progress.hpp"

namespace fp4cl::cli {

void register_make_model(CLI::App& app) {
  struct Args {
    std::string out;
    SyntheticModelOptions model;
    ModelOutputOptions output;
  };
  auto args = std::make_shared<Args>();
  auto* cmd =
      app.add_subcommand("make-model", "Write a seeded synthetic Qwen3-MoE model (BF16/F32 safetensors)");
  cmd->add_option("OUT", args->out, "Output model directory (must not exist or be empty)")->required();
  cmd->add_option("--seed", args->model.seed, "Random seed: the same seed gives the same bytes")
      ->capture_default_str();
  cmd->add_option("--layers", args->model.layers, "num_hidden_layers")->capture_default_str();
  cmd->add_option("--hidden", args->model.hidden, "hidden_size H")->capture_default_str();
  cmd->add_option("--inter", args->model.intermediate, "moe_intermediate_size I (per expert)")
      ->capture_default_str();
  cmd->add_option("--experts", args->model.experts, "num_experts E")->capture_default_str();
  cmd->add_option("--topk", args->model.experts_per_token, "num_experts_per_tok k")->capture_default_str();
  cmd->add_option("--heads", args->model.heads, "num_attention_heads")->capture_default_str();
  cmd->add_option("--kv-heads", args->model.kv_heads, "num_key_value_heads")->capture_default_str();
  cmd->add_option("--head-dim", args->model.head_dim, "head_dim")->capture_default_str();
  cmd->add_option("--vocab", args->model.vocab, "vocab_size")->capture_default_str();
  cmd->add_option("--dtype", args->model.dtype, "Weight dtype")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Dtype>{{"bf16", Dtype::bf16}, {"f32", Dtype::f32}}, CLI::ignore_case))
      ->default_str("bf16");
  cmd->add_option("--max-shard-size", args->output.max_shard_bytes,
                  "Largest safetensors file (e.g. 5GB, 500MiB); larger models are sharded")
      ->transform(CLI::AsSizeValue(true))
      ->default_str("5GB");
  cmd->add_flag("--force", args->output.overwrite, "Replace OUT if it is an existing model directory");
  cmd->callback([args] {
    ProgressBar bar;
    ModelOutputOptions output = args->output;
    output.progress = bar.callback();
    write_synthetic_model(args->out, args->model, output);
    bar.finish();
    const auto tensors = synthetic_model_tensors(args->model);
    fmt::print("wrote {}: Qwen3-MoE, {} layers, H={}, I={}, E={}, k={}, {} tensors, {}, seed {}\n", args->out,
               args->model.layers, args->model.hidden, args->model.intermediate, args->model.experts,
               args->model.experts_per_token, tensors.size(), dtype_name(args->model.dtype),
               args->model.seed);
  });
}

}  // namespace fp4cl::cli
