// `fp4cl demo`: the main job, end to end on the default OpenCL device. Lists the devices, writes a
// synthetic Qwen3-MoE model in BF16 (small, real shapes), quantizes it to FP4 (NVFP4 W4A4 in the
// ModelOpt layout unless --scheme/--layout say otherwise), loads it, and runs the layer-0 MoE
// (routed on the device from router logits) and the layer-0 q_proj on the device. Each is checked
// against the scalar reference (worst error / bound) and timed from OpenCL event profiling
// (median of several calls after a warm-up: µs per call, GB/s of FP4 weights streamed). A last
// section round-trips a random matrix through the device quantizer. --model DIR runs the layer
// sections on an existing checkpoint instead. Exits non-zero when any check fails.
#include <fmt/format.h>
#include <stdlib.h>  // mkdtemp

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "demo_layers.hpp"
#include "demo_roundtrip.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/context.hpp"
#include "fp4cl/device.hpp"
#include "fp4cl/model_writer.hpp"
#include "progress.hpp"
#include "support/check.hpp"

namespace fp4cl::cli {

namespace {

namespace fs = std::filesystem;

struct DemoOptions {
  std::string model;  // an existing checkpoint, or "" for the synthetic one
  std::string scheme = "nvfp4", layout = "modelopt";
  std::string work_dir;  // where the synthetic models are kept (and reused); "" = a temporary directory
  SyntheticModelOptions synthetic;
  LayerDemoOptions layers;
  RoundTripOptions roundtrip;
  bool skip_roundtrip = false;

  DemoOptions() {
    synthetic.layers = 1;
    synthetic.hidden = 1024;
    synthetic.intermediate = 512;
    synthetic.experts = 32;
    synthetic.experts_per_token = 4;
    synthetic.heads = 8;
    synthetic.kv_heads = 4;
    synthetic.head_dim = 128;
    synthetic.vocab = 1024;
  }
};

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/fp4cl-demo.XXXXXX";
    if (!::mkdtemp(pattern.data())) fail("demo: cannot create a temporary directory from {}", pattern);
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Writes (or, in a work directory, reuses) the synthetic BF16 model and its quantized checkpoint;
// returns the checkpoint's directory.
fs::path synthetic_checkpoint(const DemoOptions& o, const fs::path& dir) {
  const SyntheticModelOptions& m = o.synthetic;
  const std::string model_name =
      fmt::format("qwen3-moe-h{}-i{}-e{}-k{}-seed{}", m.hidden, m.intermediate, m.experts, m.experts_per_token, m.seed);
  const fs::path source = dir / model_name;
  const fs::path quantized = dir / fmt::format("{}-{}-{}", model_name, o.scheme, o.layout);
  std::error_code ec;
  if (fs::exists(quantized / "config.json", ec)) {
    fmt::print("model: reusing {}\n", quantized.string());
    return quantized;
  }
  if (!fs::exists(source / "config.json", ec)) {
    const auto start = std::chrono::steady_clock::now();
    ProgressBar bar;
    ModelOutputOptions out;
    out.progress = bar.callback();
    write_synthetic_model(source, m, out);
    bar.finish();
    fmt::print(
        "model: synthetic Qwen3-MoE in BF16, {} layer(s), H={} I={} E={} k={}, attention {}×{} heads of {} "
        "({:.1f} s)\n",
        m.layers, m.hidden, m.intermediate, m.experts, m.experts_per_token, m.heads, m.kv_heads, m.head_dim,
        seconds_since(start));
  }
  QuantizeOptions q;
  q.scheme = quant_scheme_from_name(o.scheme);
  q.layout = quant_producer_from_name(o.layout);
  const auto start = std::chrono::steady_clock::now();
  ProgressBar bar;
  ModelOutputOptions out;
  out.progress = bar.callback();
  const QuantizeSummary summary = quantize_model(source, quantized, q, out);
  bar.finish();
  fmt::print("model: quantized to {} in the {} layout, {} modules ({:.1f} s)\n", q.scheme.name(), to_string(q.layout),
             summary.quantized.size(), seconds_since(start));
  return quantized;
}

void run_demo(const DemoOptions& o) {
  if (o.layers.tokens < 1 || o.layers.runs < 1)
    fail("demo: --tokens and --runs must be at least 1 (got {} and {})", o.layers.tokens, o.layers.runs);
  const auto devices = list_devices();
  fmt::print("OpenCL devices ({}):\n", devices.size());
  for (const auto& d : devices) fmt::print("  {}\n", d.describe());
  const std::string selector = device_selector_from_env();
  const Context ctx = Context::create(selector);
  fmt::print("selected (FP4CL_DEVICE=\"{}\"): {}\n", selector, ctx.info().describe());
  if (!ctx.profiling_enabled()) fail("the command queue has no profiling; the demo times kernels with events");

  std::unique_ptr<TemporaryDirectory> temporary;
  fs::path checkpoint_dir;
  if (!o.model.empty()) {
    checkpoint_dir = o.model;
  } else {
    fs::path dir = o.work_dir;
    if (dir.empty()) {
      temporary = std::make_unique<TemporaryDirectory>();
      dir = temporary->path();
    }
    checkpoint_dir = synthetic_checkpoint(o, dir);
  }
  const Checkpoint ckpt = Checkpoint::open(checkpoint_dir);
  fmt::print("checkpoint: {} ({}), {} quantized layers\n\n", checkpoint_dir.string(),
             to_string(ckpt.config().producer()), ckpt.layers().size());

  bool ok = demo_moe(ctx, ckpt, o.layers);
  fmt::print("\n");
  ok = demo_linear(ctx, ckpt, o.layers) && ok;
  if (!o.skip_roundtrip) {
    fmt::print("\nquantize / dequantize round trip on the device:\n");
    ok = demo_roundtrip(ctx, o.roundtrip) && ok;
  }
  if (!ok) {
    fmt::print("\ndemo: FAILED: the device's results are outside the scalar reference's bounds\n");
    throw CLI::RuntimeError(1);
  }
  fmt::print("\ndemo: all checks passed\n");
}

}  // namespace

void register_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  auto* cmd = app.add_subcommand(
      "demo",
      "The main job: quantize a synthetic Qwen3-MoE model to FP4, run its MoE and q_proj layers on the device, "
      "check them against the scalar reference and time them");
  auto* model = cmd->add_option("--model", o->model, "Run on this checkpoint instead of the synthetic model");
  cmd->add_option("--scheme", o->scheme, "Synthetic model: nvfp4 (W4A4), nvfp4a16, mxfp4 or mxfp4a16")
      ->capture_default_str()
      ->excludes(model);
  cmd->add_option("--layout", o->layout, "Synthetic model: modelopt (NVFP4 only) or compressed-tensors")
      ->capture_default_str()
      ->excludes(model);
  cmd->add_option("--work-dir", o->work_dir,
                  "Keep the synthetic models in this directory and reuse them (default: a temporary directory)")
      ->excludes(model);
  cmd->add_option("--hidden", o->synthetic.hidden, "Synthetic model: hidden size H")->capture_default_str();
  cmd->add_option("--inter", o->synthetic.intermediate, "Synthetic model: expert intermediate size I")
      ->capture_default_str();
  cmd->add_option("--experts", o->synthetic.experts, "Synthetic model: experts E")->capture_default_str();
  cmd->add_option("--topk", o->synthetic.experts_per_token, "Synthetic model: experts per token k")
      ->capture_default_str();
  cmd->add_option("--heads", o->synthetic.heads, "Synthetic model: attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", o->synthetic.kv_heads, "Synthetic model: key/value heads")->capture_default_str();
  cmd->add_option("--head-dim", o->synthetic.head_dim, "Synthetic model: head dimension")->capture_default_str();
  cmd->add_option("--vocab", o->synthetic.vocab, "Synthetic model: vocabulary size")->capture_default_str();
  cmd->add_option("--model-seed", o->synthetic.seed, "Synthetic model: seed of its weights")->capture_default_str();
  cmd->add_option("--tokens", o->layers.tokens, "Tokens per layer call")->capture_default_str();
  cmd->add_option("--runs", o->layers.runs, "Timed calls per measurement (after 2 warm-up calls)")
      ->capture_default_str();
  cmd->add_option("--seed", o->layers.seed, "Seed of the activations")->capture_default_str();
  cmd->add_option("--rows", o->roundtrip.rows, "Round trip: rows (M) of the matrix")->capture_default_str();
  cmd->add_option("--cols", o->roundtrip.cols, "Round trip: columns (K), a multiple of 32")->capture_default_str();
  cmd->add_option("--local-size", o->roundtrip.local_size,
                  "Round trip: work-group size, block columns and rows (default: per device kind)")
      ->expected(2);
  cmd->add_option("--blocks-per-item", o->roundtrip.blocks_per_item,
                  "Round trip: blocks one work-item quantizes (default: per device kind)");
  cmd->add_flag("--skip-round-trip", o->skip_roundtrip, "Leave out the quantize / dequantize round trip");
  cmd->callback([o] {
    DemoOptions options = *o;
    options.roundtrip.runs = options.layers.runs;
    options.roundtrip.seed = options.layers.seed;
    run_demo(options);
  });
}

}  // namespace fp4cl::cli
