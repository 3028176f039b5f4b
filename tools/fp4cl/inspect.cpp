// `fp4cl inspect DIR [--json] [--verify]`: what a checkpoint holds and how fp4cl reads it —
// producer, files, how its MoE layers run (config.json's top-k, renormalization, routing and
// activation), the quantized layers grouped by name pattern with scheme, experts, shapes, bytes
// and global-scale ranges, the modules fp4cl cannot run, and warnings.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "checkpoint/module_names.hpp"
#include "commands.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/checkpoint_report.hpp"
#include "fp4cl/model_config.hpp"
#include "layer_runs.hpp"

namespace fp4cl::cli {

namespace {

using Json = nlohmann::ordered_json;

std::string human_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string shape_text(const CheckpointLayer& l) {
  if (l.kind == LayerKind::linear) return fmt::format("linear [{}, {}]", l.out_features, l.in_features);
  return fmt::format("MoE ({}), {} experts, H {}, I {}", l.expert_naming, l.num_experts, l.hidden, l.intermediate);
}

std::string range_text(const char* what, const std::optional<ScaleRange>& r) {
  if (!r) return "";
  if (r->min == r->max) return fmt::format(", {} {:.9g}", what, r->min);
  return fmt::format(", {} [{:.9g}, {:.9g}]", what, r->min, r->max);
}

Json range_json(const std::optional<ScaleRange>& r) {
  if (!r) return nullptr;
  return Json{{"min", r->min}, {"max", r->max}};
}

Json layer_json(const LayerReport& r) {
  const CheckpointLayer& l = r.layer;
  Json j;
  j["kind"] = to_string(l.kind);
  j["scheme"] = l.scheme.name();
  j["weight_format"] = to_string(l.scheme.weight);
  j["activations"] = l.scheme.w4a16() ? "bf16" : "fp4_dynamic";
  if (l.kind == LayerKind::linear) {
    j["out_features"] = l.out_features;
    j["in_features"] = l.in_features;
  } else {
    j["experts"] = l.num_experts;
    j["hidden"] = l.hidden;
    j["intermediate"] = l.intermediate;
    j["expert_naming"] = l.expert_naming;
  }
  j["bytes"] = l.stored_bytes;
  j["weight_global_scale"] = range_json(r.weight_global_scale);
  j["input_scale"] = range_json(r.input_scale);
  j["biases"] = r.biases;
  j["gate_up_scale_mismatches"] = r.gate_up_scale_mismatches;
  j["ignored_activation_scales"] = r.ignored_activation_scales;
  return j;
}

bool has_moe(const CheckpointReport& r) {
  return std::any_of(r.layers.begin(), r.layers.end(),
                     [](const LayerReport& l) { return l.layer.kind == LayerKind::moe; });
}

// The MoE layers' shared experts: the gated MLPs "<p>.shared_experts" beside their experts
// (DeepSeek, Kimi-K2, GLM-4.5), which run fused (MoeLoadOptions::shared_experts, `fp4cl run
// --shared-experts`) or as layers of their own.
struct SharedExperts {
  std::size_t layers = 0;          // MoE layers with one
  std::string first;               // the first one's prefix
  std::int64_t intermediate = 0;   // its intermediate size
  std::int64_t fused_experts = 0;  // the experts of the routed size it fuses as (0: it cannot)
};

SharedExperts shared_experts(const CheckpointReport& r) {
  SharedExperts s;
  for (const LayerReport& moe : r.layers) {
    if (moe.layer.kind != LayerKind::moe) continue;
    const std::string prefix = detail::beside_experts(moe.layer.name, "shared_experts");
    const auto gate = std::find_if(r.layers.begin(), r.layers.end(), [&](const LayerReport& l) {
      return l.layer.kind == LayerKind::linear && l.layer.name == prefix + ".gate_proj";
    });
    if (gate == r.layers.end()) continue;
    if (s.layers++ > 0) continue;
    s.first = prefix;
    s.intermediate = gate->layer.out_features;
    const bool fits = gate->layer.scheme == moe.layer.scheme && gate->layer.in_features == moe.layer.hidden &&
                      moe.layer.intermediate > 0 && s.intermediate % moe.layer.intermediate == 0;
    s.fused_experts = fits ? s.intermediate / moe.layer.intermediate : 0;
  }
  return s;
}

// How the MoE layers run, from config.json (MoeConfig::from_checkpoint's and the C API's
// choices); null without MoE layers.
Json moe_json(const CheckpointReport& r, const ModelConfig& m) {
  if (!has_moe(r)) return nullptr;
  Json j;
  j["top_k"] = m.experts_per_token ? Json(*m.experts_per_token) : Json(nullptr);
  const std::optional<bool> renormalize = m.renormalize();
  j["renormalize"] = renormalize ? Json(*renormalize) : Json(nullptr);
  const MoeLogitRouting routing = m.logit_routing();
  j["routing"] = !routing.unsupported.empty() ? "precomputed" : routing.plain_softmax() ? "softmax" : "grouped";
  if (routing.unsupported.empty() && !routing.plain_softmax())
    j["logit_routing"] = Json{{"scoring", routing.scoring == MoeLogitRouting::Scoring::sigmoid ? "sigmoid" : "softmax"},
                              {"groups", routing.groups},
                              {"top_groups", routing.top_groups},
                              {"correction_bias", m.router_correction_bias()},
                              {"scaling_factor", routing.scaling_factor}};
  const MoeActivation a = m.activation();
  if (a.kind == MoeActivation::Kind::swiglu_clamped) {
    j["activation"] = Json{{"kind", "swiglu_clamped"}, {"alpha", a.alpha}, {"limit", a.limit}};
  } else {
    j["activation"] = Json{{"kind", "swiglu"}};
  }
  const SharedExperts s = shared_experts(r);
  j["shared_experts"] = s.layers == 0 ? Json(nullptr)
                                      : Json{{"layers", s.layers},
                                             {"first", s.first},
                                             {"intermediate", s.intermediate},
                                             {"fused_experts", s.fused_experts}};
  return j;
}

// "model.layers.3.mlp.shared_experts and 57 more, I 2048: fuses as 1 expert of the routed size
// (fp4cl run --shared-experts)".
std::string shared_experts_text(const SharedExperts& s) {
  return fmt::format("{}{}, I {}: {}", s.first, s.layers > 1 ? fmt::format(" and {} more", s.layers - 1) : "",
                     s.intermediate,
                     s.fused_experts > 0
                         ? fmt::format("fuses as {} expert{} of the routed size (fp4cl run --shared-experts)",
                                       s.fused_experts, s.fused_experts == 1 ? "" : "s")
                         : std::string("runs as a layer of its own (fp4cl run --layer PREFIX)"));
}

// "softmax routing on the device or precomputed", "sigmoid, 8 groups (4 kept), correction bias, ×
// 2.5 routing on the device or precomputed" or "precomputed routing only (why)".
std::string logit_routing_text(const ModelConfig& m) {
  MoeLogitRouting r = m.logit_routing();
  if (!r.unsupported.empty()) return fmt::format("precomputed routing only ({})", r.unsupported);
  if (m.router_correction_bias()) r.correction_bias.assign(1, 0.0f);  // for describe(): the checkpoint has it
  return fmt::format("{} routing on the device or precomputed", describe(r));
}

std::string moe_text(const ModelConfig& m) {
  const std::optional<bool> renormalize = m.renormalize();
  return fmt::format(
      "{}, {}, {}, {}",
      m.experts_per_token ? fmt::format("top-{}", *m.experts_per_token) : "top-k not in config.json (set it to run)",
      !renormalize ? "renormalization not in config.json (set it to run)"
                   : (*renormalize ? "renormalized" : "not renormalized"),
      logit_routing_text(m),
      describe(m.activation()));
}

Json report_json(const CheckpointReport& r, const ModelConfig& m) {
  Json j;
  j["directory"] = r.directory;
  j["producer"] = r.producer;
  j["config"] = r.config_source;
  j["moe"] = moe_json(r, m);
  j["tensors_source"] = r.tensors_source;
  j["shards"] = r.shards;
  j["tensors"] = r.tensors;
  j["file_bytes"] = r.file_bytes;
  j["quantized_bytes"] = r.quantized_bytes;
  j["schemes"] = Json::object();
  for (const auto& [scheme, layers] : r.schemes) j["schemes"][scheme.name()] = layers;
  j["groups"] = Json::array();
  for (const LayerGroup& g : r.groups) {
    Json gj;
    gj["label"] = g.label();
    gj["pattern"] = g.pattern;
    gj["numbers"] = g.numbers;
    gj["names"] = Json::array();
    for (std::size_t i : g.layers) gj["names"].push_back(r.layers[i].layer.name);
    gj.update(layer_json(g.total));
    gj.erase("ignored_activation_scales");
    gj["ignored_activation_scales"] = g.total.ignored_activation_scales.size();
    j["groups"].push_back(std::move(gj));
  }
  j["layers"] = Json::array();
  for (const LayerReport& l : r.layers) {
    Json lj{{"name", l.layer.name}};
    lj.update(layer_json(l));
    j["layers"].push_back(std::move(lj));
  }
  j["unsupported"] = Json::array();
  for (const UnsupportedModule& u : r.unsupported)
    j["unsupported"].push_back({{"module", u.module}, {"reason", u.reason}});
  j["warnings"] = r.warnings;
  return j;
}

void print_text(const CheckpointReport& r, const ModelConfig& m) {
  fmt::print("checkpoint {}\n", r.directory);
  fmt::print("  producer   {} ({})\n", r.producer, r.config_source);
  fmt::print("  tensors    {} in {} shard{} ({}), {}\n", r.tensors, r.shards, r.shards == 1 ? "" : "s",
             r.tensors_source, human_bytes(r.file_bytes));
  fmt::print("  quantized  {} layers, {} to load\n", r.layers.size(), human_bytes(r.quantized_bytes));
  std::string schemes;
  for (const auto& [scheme, layers] : r.schemes) {
    schemes += fmt::format("{}{} ({} layers)", schemes.empty() ? "" : ", ", scheme.name(), layers);
  }
  fmt::print("  schemes    {}\n", schemes.empty() ? "none" : schemes);
  if (has_moe(r)) fmt::print("  moe        {}\n", moe_text(m));
  if (const SharedExperts s = shared_experts(r); s.layers > 0) fmt::print("  shared     {}\n", shared_experts_text(s));
  fmt::print("layers\n");
  for (const LayerGroup& g : r.groups) {
    const LayerReport& t = g.total;
    fmt::print("  {}: {}, {}, {}{}{}{}\n", g.label(), shape_text(t.layer), t.layer.scheme.name(),
               human_bytes(t.layer.stored_bytes), t.biases ? ", with biases" : "",
               range_text("weight gs_d", t.weight_global_scale), range_text("input gs_d", t.input_scale));
  }
  if (!r.unsupported.empty()) {
    fmt::print("not loadable by fp4cl\n");
    for (const UnsupportedModule& u : r.unsupported) fmt::print("  {}: {}\n", u.module, u.reason);
  }
  if (!r.warnings.empty()) {
    fmt::print("warnings\n");
    for (const std::string& w : r.warnings) fmt::print("  {}\n", w);
  }
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Describe a quantized checkpoint: producer, layers, schemes, scales");
  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto verify = std::make_shared<bool>(false);
  cmd->add_option("dir", *dir, "Model directory (config.json / hf_quant_config.json and safetensors)")->required();
  cmd->add_flag("--json", *json, "Print the report as JSON");
  cmd->add_flag("--verify", *verify, "Also load every layer, checking every block scale and global scale");
  cmd->callback([dir, json, verify] {
    const Checkpoint checkpoint = Checkpoint::open(*dir);
    const CheckpointReport report = inspect_checkpoint(checkpoint);
    const ModelConfig model = ModelConfig::load(*dir);
    if (*verify) {
      for (const CheckpointLayer& l : checkpoint.layers()) {
        if (l.kind == LayerKind::linear) {
          checkpoint.load_linear(l.name);
        } else {
          checkpoint.load_moe(l.name);
        }
      }
    }
    if (*json) {
      fmt::print("{}\n", report_json(report, model).dump(2));
    } else {
      print_text(report, model);
      if (*verify) fmt::print("verified: every layer loads\n");
    }
  });
}

}  // namespace fp4cl::cli
