// fp4cl-bench tune: searches the named tuning parameters of the linear and MoE kernels for the
// selected device, schemes, layer shapes and token buckets, checks every candidate against the
// scalar reference, and writes the winners to a tuning database (host/tuning/).
//
//   fp4cl-bench tune --preset qwen3-30b-a3b --linear 4096x4096 --scheme nvfp4-w4a16,nvfp4-w4a4
//       --tokens 1,2,4,8,16,32,64,128,256,512 --output tuning/pocl-cpu.json        (one line)
//
// --preset adds the preset's MoE layer and its expert projections as linear shapes (FC1 2I x H,
// FC2 H x I); --linear NxK adds linear shapes; --op limits to linear or moe. --kernel names the
// MoE strategies to tune (default: those automatic selection can choose on the device; e.g.
// --kernel mma tunes the tensor-core strategy alone, and forces its emulation off NVIDIA);
// --max-candidates bounds the candidates timed per strategy and bucket. The output file is
// merged into (entries of the same device and key are replaced); --replace first drops all of this
// device's entries (other devices' stay: tuning/pocl-cpu.json holds two CPUs); its default is
// the user's database (~/.config/fp4cl/tuning.json). While tuning, no database is loaded
// (FP4CL_TUNING_FILE=none): candidates are compared from the built-in defaults. The entry each
// bucket took from the databases loaded before (shipped, user's, FP4CL_TUNING_FILE; the device's
// own or a similar device's) is timed beside them and written where it is fastest.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_commands.hpp"
#include "bench_context.hpp"
#include "bench_options.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/moe.hpp"
#include "presets.hpp"
#include "tune_targets.hpp"
#include "tuning/tuning_database.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl::bench {

namespace {

struct TuneArgs {
  std::vector<std::string> ops = {"linear", "moe"};
  std::string preset;
  std::vector<std::string> linear;  // NxK
  std::int64_t hidden = 0, inter = 0, experts = 0;
  int topk = 0;
  std::vector<std::string> schemes = {"nvfp4-w4a16", "nvfp4-w4a4"};
  std::vector<std::int64_t> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  std::vector<std::string> moe_kernels;
  std::string output;
  bool replace = false;
  int iters = 8, passes = 2, check_samples = 64, max_candidates = 0;
  double rotate_mib = 0, warmup_ms = TuneSettings{}.warmup_ms;
};

std::pair<std::int64_t, std::int64_t> parse_nxk(const std::string& s) {
  const auto x = s.find('x');
  std::size_t a = 0, b = 0;
  std::int64_t n = 0, k = 0;
  try {
    if (x != std::string::npos) {
      n = std::stoll(s.substr(0, x), &a);
      k = std::stoll(s.substr(x + 1), &b);
    }
  } catch (const std::exception&) {
    a = 0;
  }
  if (x == std::string::npos || a != x || b != s.size() - x - 1 || n < 1 || k < 16)
    throw Error("--linear takes NxK (e.g. 4096x4096), got '" + s + "'");
  return {n, k};
}

void run_tune(const TuneArgs& a) {
  for (const std::string& op : a.ops)
    if (op != "linear" && op != "moe") throw Error("--op takes linear and/or moe, got '" + op + "'");
  const std::vector<QuantScheme> schemes = parse_schemes(a.schemes);
  const bool do_linear = std::find(a.ops.begin(), a.ops.end(), "linear") != a.ops.end();
  const bool do_moe = std::find(a.ops.begin(), a.ops.end(), "moe") != a.ops.end();
  if (!a.moe_kernels.empty() && !do_moe) throw Error("--kernel names MoE strategies: it needs --op moe");
  const std::vector<std::string> strategies = moe_kernel_strategies();
  for (const std::string& k : a.moe_kernels) {
    if (std::find(strategies.begin(), strategies.end(), k) != strategies.end()) continue;
    std::string valid;
    for (const std::string& s : strategies) valid += (valid.empty() ? "" : ", ") + s;
    throw Error(fmt::format("--kernel: unknown MoE strategy '{}'; valid: {}", k, valid));
  }
  const bool explicit_moe = a.hidden || a.inter || a.experts || a.topk;
  if (explicit_moe && !a.preset.empty()) throw Error("give either --preset or --hidden/--inter/--experts/--topk, not both");
  if (explicit_moe && (!a.hidden || !a.inter || !a.experts || !a.topk))
    throw Error("an explicit MoE shape needs all of --hidden, --inter, --experts and --topk");

  std::vector<std::pair<std::int64_t, std::int64_t>> linear_shapes;
  for (const std::string& s : a.linear) linear_shapes.push_back(parse_nxk(s));
  std::vector<MoeTuneShape> moe_shapes;
  if (!a.preset.empty()) {
    const ModelPreset& p = find_preset(a.preset);
    linear_shapes.push_back({2 * p.intermediate, p.hidden});
    linear_shapes.push_back({p.hidden, p.intermediate});
    moe_shapes.push_back({p.hidden, p.intermediate, p.experts, p.top_k});
  }
  if (explicit_moe) moe_shapes.push_back({a.hidden, a.inter, a.experts, a.topk});
  if ((do_linear ? linear_shapes.size() : 0) + (do_moe ? moe_shapes.size() : 0) == 0)
    throw Error("nothing to tune: give --preset, --linear NxK or an MoE shape (--hidden --inter --experts --topk)");

  const std::string output = a.output.empty() ? tuning::TuningStore::user_database_path() : a.output;
  if (output.empty()) throw Error("no --output given and neither XDG_CONFIG_HOME nor HOME is set");
  tuning::Database db;
  std::error_code ec;
  if (std::filesystem::exists(output, ec)) db = tuning::load_database(output);  // errors: never clobber

  // What layers on this device use today, kept to time beside the search; then candidates are
  // compared from the built-in defaults, with no database in the way.
  const std::shared_ptr<const tuning::TuningStore> database = tuning::tuning_store();
  ::setenv("FP4CL_TUNING_FILE", "none", 1);
  tuning::reload_tuning_store();
  Context ctx = bench_context();
  RunOptions rotation_options;
  rotation_options.rotate_mib = a.rotate_mib;
  TuneSettings settings;
  settings.buckets = a.tokens;
  settings.iters = a.iters;
  settings.warmup_ms = a.warmup_ms;
  settings.max_passes = a.passes;
  settings.max_candidates = a.max_candidates;
  settings.moe_kernels = a.moe_kernels;
  settings.check_samples = a.check_samples;
  settings.rotation_bytes = rotation_bytes(ctx, rotation_options);
  settings.log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  settings.database = database;
  fmt::print(stderr, "tuning on {}\n", ctx.info().describe());

  const tuning::DeviceIdentity device = tuning::DeviceIdentity::of(ctx.info());
  // --replace: this device's earlier entries go; other devices' stay (a shipped file holds several).
  if (a.replace) db.remove_device(device);
  const auto start = std::chrono::steady_clock::now();
  std::size_t written = 0;
  for (const QuantScheme& scheme : schemes) {
    if (do_linear)
      for (const auto& [n, k] : linear_shapes)
        for (const tuning::Entry& e : tune_linear(ctx, scheme, n, k, settings)) {
          db.put(device, e);
          ++written;
        }
    if (do_moe)
      for (const MoeTuneShape& s : moe_shapes)
        for (const tuning::Entry& e : tune_moe(ctx, scheme, s, settings)) {
          db.put(device, e);
          ++written;
        }
    // Saved after each scheme: a long tuning run interrupted later keeps what it found.
    const std::filesystem::path parent = std::filesystem::path(output).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    tuning::save_database(output, db);
  }
  fmt::print("{} tuned entries for {} written to {} ({:.0f} s)\n", written, device.describe(), output,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

void register_tune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* t = app.add_subcommand("tune", "search the kernels' tuning parameters and write a tuning database");
  t->add_option("--op", a->ops, "linear and/or moe")->delimiter(',')->capture_default_str();
  t->add_option("--preset", a->preset, "model preset: its MoE layer and expert projections (" + preset_names() + ")");
  t->add_option("--linear", a->linear, "a linear shape NxK (repeatable or comma-separated)")->delimiter(',');
  t->add_option("--hidden", a->hidden, "MoE H")->check(CLI::Range(std::int64_t{16}, std::int64_t{1} << 18));
  t->add_option("--inter", a->inter, "MoE I")->check(CLI::Range(std::int64_t{16}, std::int64_t{1} << 18));
  t->add_option("--experts", a->experts, "MoE E")->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}));
  t->add_option("--topk", a->topk, "MoE k")->check(CLI::Range(1, 64));
  t->add_option("--scheme", a->schemes, "schemes (comma-separated)")->delimiter(',')->capture_default_str();
  t->add_option("--tokens", a->tokens, "token buckets: the counts timed, usually powers of two (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  t->add_option("--output", a->output, "the database file to write (default: the user's ~/.config/fp4cl/tuning.json)");
  t->add_flag("--replace", a->replace,
              "drop this device's earlier entries from the file, keep other devices' (default: merge into them)");
  t->add_option("--iters", a->iters, "timed calls per candidate")->check(CLI::Range(1, 1000))->capture_default_str();
  t->add_option("--warmup-ms", a->warmup_ms, "untimed calls per candidate first, for this many milliseconds")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  t->add_option("--passes", a->passes, "coordinate-descent passes")->check(CLI::Range(1, 10))->capture_default_str();
  t->add_option("--kernel", a->moe_kernels,
                "MoE strategies to tune (comma-separated; default: those automatic selection can choose on the device)")
      ->delimiter(',');
  t->add_option("--max-candidates", a->max_candidates, "candidates timed per strategy and bucket, at most (0: no limit)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  t->add_option("--check-samples", a->check_samples, "linear outputs checked per candidate")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  t->add_option("--rotate-mib", a->rotate_mib, "weights to cycle through between two uses of one copy (MiB)")
      ->check(CLI::Range(0.0, 65536.0));
  t->callback([a] { run_tune(*a); });
}

}  // namespace fp4cl::bench
