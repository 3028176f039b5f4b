// compressed-tensors quantization configs (FP4.md §5), as llm-compressor writes them into
// config.json → quantization_config:
//   {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
//    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {...}, "input_activations":
//    {...} | null, "output_activations": null, "format": ...}}, "ignore": [...], ...}
// Facts checked against compressed-tensors (quantization/quant_args.py defaults and strategy
// inference, quant_scheme.py presets NVFP4/NVFP4A16/MXFP4/MXFP4A16, quant_config.py preset
// groups, utils/match.py and lifecycle/apply.py target matching) and vLLM
// (compressed_tensors/compressed_tensors.py, utils.py).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/module_pattern.hpp"
#include "checkpoint/quant_rules.hpp"
#include "support/check.hpp"
#include "support/log.hpp"
#include "support/text.hpp"

namespace fp4cl::detail {

namespace {

constexpr std::string_view kMixedPrecision = "mixed-precision";

// CompressionFormat values that store something other than FP4: known, not run by fp4cl.
constexpr std::string_view kOtherFormats[] = {
    "dense",          "sparse-bitmask", "sparse-24-bitmask", "int-quantized",   "float-quantized",
    "naive-quantized", "pack-quantized", "marlin-24",         "mxfp8-quantized",
};

// What an FP4 format stores and what its QuantizationArgs must say.
struct Fp4Format {
  std::string_view format;  // "nvfp4-pack-quantized"
  std::string_view name;    // "NVFP4"
  WeightFormat weight;
  std::string_view strategy;  // compressed-tensors strategy of weights and activations
  std::int64_t group_size;
  bool (*activation_dynamic_ok)(const Json& dynamic);
  std::string_view activation_args;  // the W4A4 activation args, for messages
  bool (*scale_dtype_ok)(std::string_view dtype);
};

bool nvfp4_dynamic_ok(const Json& d) {
  // "local" (the NVFP4 preset): per-block scales computed at run time, the global scale
  // calibrated and stored as input_global_scale. false is accepted too: exporters write it for the
  // same scheme (ModelOpt's compressed-tensors-style copy does), and vLLM's NVFP4 W4A4 check
  // does not look at `dynamic`. true would mean no stored global scale: rejected.
  return (d.is_string() && d.get<std::string>() == "local") || (d.is_boolean() && !d.get<bool>());
}
bool mxfp4_dynamic_ok(const Json& d) { return d.is_boolean() && d.get<bool>(); }

bool strip_torch_equals(std::string_view dtype, std::string_view want) {
  constexpr std::string_view torch = "torch.";
  if (dtype.compare(0, torch.size(), torch) == 0) dtype.remove_prefix(torch.size());
  return dtype == want;
}
bool nvfp4_scale_dtype_ok(std::string_view d) { return strip_torch_equals(d, "float8_e4m3fn"); }
bool mxfp4_scale_dtype_ok(std::string_view d) {
  return strip_torch_equals(d, "uint8") || strip_torch_equals(d, "float8_e8m0fnu");
}

const Fp4Format kFp4Formats[] = {
    {"nvfp4-pack-quantized", "NVFP4", WeightFormat::nvfp4, "tensor_group", 16, nvfp4_dynamic_ok,
     "num_bits 4, type float, strategy tensor_group, group_size 16, symmetric, dynamic \"local\"",
     nvfp4_scale_dtype_ok},
    {"mxfp4-pack-quantized", "MXFP4", WeightFormat::mxfp4, "group", 32, mxfp4_dynamic_ok,
     "num_bits 4, type float, strategy group, group_size 32, symmetric, dynamic true", mxfp4_scale_dtype_ok},
};

const Fp4Format* find_fp4_format(std::string_view format) {
  for (const Fp4Format& f : kFp4Formats) {
    if (f.format == format) return &f;
  }
  return nullptr;
}

bool is_other_format(std::string_view format) {
  return std::find(std::begin(kOtherFormats), std::end(kOtherFormats), format) != std::end(kOtherFormats);
}

// A QuantizationArgs object with compressed-tensors' defaults and strategy inference applied.
struct QuantArgs {
  std::int64_t num_bits = 8;
  std::string type = "int";
  bool symmetric = true;
  std::optional<std::int64_t> group_size;
  std::string strategy;
  bool strategy_inferred = false;
  Json dynamic = false;           // true, false or "local"
  bool grouped_actorder = false;  // actorder "group"/"dynamic"/true: columns permuted by g_idx
  bool block_structure = false;
  std::optional<std::string> scale_dtype;
};

QuantArgs read_args(const Json& object, const JsonPath& at) {
  expect_object(object, at);
  QuantArgs a;
  if (const auto v = integer_member(object, "num_bits", at)) a.num_bits = *v;
  if (const auto v = string_member(object, "type", at)) a.type = to_lower(*v);
  if (const auto v = bool_member(object, "symmetric", at)) a.symmetric = *v;
  a.group_size = integer_member(object, "group_size", at);
  if (const auto v = string_member(object, "strategy", at)) {
    a.strategy = to_lower(*v);
  } else {
    a.strategy_inferred = true;
    a.strategy = !a.group_size ? "tensor" : *a.group_size > 0 ? "group" : *a.group_size == -1 ? "channel" : "invalid";
  }
  if (const Json* d = member(object, "dynamic")) {
    if (!d->is_boolean() && !d->is_string()) {
      (at / "dynamic").fail("must be true, false or \"local\", got {}", json_text(*d));
    }
    a.dynamic = d->is_string() ? Json(to_lower(d->get<std::string>())) : *d;
  }
  if (const Json* order = member(object, "actorder")) {
    if (order->is_boolean()) {
      a.grouped_actorder = order->get<bool>();
    } else if (order->is_string()) {
      const std::string s = to_lower(order->get<std::string>());
      if (s == "group" || s == "dynamic") {
        a.grouped_actorder = true;
      } else if (s != "weight" && s != "static") {
        (at / "actorder").fail("is \"{}\", expected null, \"weight\" or \"group\"", s);
      }
    } else {
      (at / "actorder").fail("must be null, a boolean or a string, got {}", json_text(*order));
    }
  }
  a.block_structure = member(object, "block_structure") != nullptr;
  a.scale_dtype = string_member(object, "scale_dtype", at);
  return a;
}

std::string group_size_text(const std::optional<std::int64_t>& g) { return g ? std::to_string(*g) : "null"; }

std::string describe(const QuantArgs& a) {
  return fmt::format("num_bits {}, type {}, strategy {}{}, group_size {}, symmetric {}, dynamic {}", a.num_bits,
                     a.type, a.strategy, a.strategy_inferred ? " (inferred)" : "", group_size_text(a.group_size),
                     a.symmetric, a.dynamic.dump());
}

void check_fp4_weights(const QuantArgs& w, const Fp4Format& f, const JsonPath& at) {
  if (w.num_bits != 4) (at / "num_bits").fail("is {}, expected 4 for format {} (FP4 weights)", w.num_bits, f.format);
  if (w.type != "float") {
    (at / "type").fail("is \"{}\", expected \"float\" for format {} (E2M1 weights)", w.type, f.format);
  }
  if (!w.symmetric) {
    (at / "symmetric").fail("is false: asymmetric quantization (zero points) is not {}; expected true", f.name);
  }
  if (w.strategy != f.strategy) {
    (at / "strategy")
        .fail("is \"{}\"{}, expected \"{}\" for {} weights", w.strategy,
              w.strategy_inferred ? " (inferred from group_size, as strategy is not given)" : "", f.strategy, f.name);
  }
  if (w.group_size != f.group_size) {
    (at / "group_size")
        .fail("is {}, expected {} for {} ({}-element blocks)", group_size_text(w.group_size), f.group_size, f.name,
              f.group_size);
  }
  if (!(w.dynamic.is_boolean() && !w.dynamic.get<bool>())) {
    (at / "dynamic").fail("is {}, expected false: checkpoint weights are stored quantized", w.dynamic.dump());
  }
  if (w.grouped_actorder) {
    (at / "actorder").fail("asks for activation-ordered groups (g_idx), which are not supported");
  }
  if (w.block_structure) (at / "block_structure").fail("is set, expected null for {} weights", f.name);
  if (w.scale_dtype && !f.scale_dtype_ok(*w.scale_dtype)) {
    (at / "scale_dtype").fail("is \"{}\", which is not the block-scale type of {}", *w.scale_dtype, f.name);
  }
}

// W4A16 when `activations` is absent or null, W4A4 when it describes the format's dynamic FP4
// activation quantization; anything else (FP8, int8, static group scales ...) is an error.
Activations read_activations(const Json* activations, const Fp4Format& f, const JsonPath& at) {
  if (!activations) return Activations::bf16;
  const QuantArgs a = read_args(*activations, at);
  const bool fp4 = a.num_bits == 4 && a.type == "float" && a.symmetric && a.strategy == f.strategy &&
                   a.group_size == f.group_size && f.activation_dynamic_ok(a.dynamic) && !a.grouped_actorder;
  if (!fp4) {
    at.fail("does not describe {} activations: {} weights need {} activations ({}) or none (null, W4A16); got {}",
            f.name, f.name, f.name, f.activation_args, describe(a));
  }
  return Activations::fp4_dynamic;
}

// The FP4 presets compressed-tensors expands a list-valued group ("NVFP4": ["Linear"]) into.
std::optional<Json> fp4_preset(std::string_view upper_name) {
  const Json nvfp4 = {{"num_bits", 4},        {"type", "float"}, {"strategy", "tensor_group"},
                      {"group_size", 16},     {"symmetric", true}};
  const Json mxfp4 = {{"num_bits", 4}, {"type", "float"}, {"strategy", "group"}, {"group_size", 32}, {"symmetric", true}};
  auto with_dynamic = [](Json args, Json dynamic) {
    args["dynamic"] = std::move(dynamic);
    return args;
  };
  if (upper_name == "NVFP4A16") return Json{{"weights", with_dynamic(nvfp4, false)}};
  if (upper_name == "NVFP4") {
    return Json{{"weights", with_dynamic(nvfp4, false)}, {"input_activations", with_dynamic(nvfp4, "local")}};
  }
  if (upper_name == "MXFP4A16") return Json{{"weights", with_dynamic(mxfp4, false)}};
  if (upper_name == "MXFP4") {
    return Json{{"weights", with_dynamic(mxfp4, false)}, {"input_activations", with_dynamic(mxfp4, true)}};
  }
  return std::nullopt;
}

// What a group does to the modules it targets: an FP4 scheme, or a known non-FP4 format.
struct Outcome {
  std::optional<QuantScheme> scheme;
  std::string what;  // when !scheme

  std::string text() const { return scheme ? scheme->name() : what; }
  bool operator==(const Outcome& o) const { return scheme == o.scheme && what == o.what; }
};

struct Group {
  std::string name;
  std::vector<ModulePattern> targets;
  Outcome outcome;
};

bool looks_like_class_name(const std::string& target) {
  return !target.empty() && std::isupper(static_cast<unsigned char>(target[0])) &&
         target.find('.') == std::string::npos && target.compare(0, 3, "re:") != 0;
}

// compressed-tensors' precedence (utils/match.py match_targets): exact names, then regexes,
// then class names.
int specificity(ModulePattern::Kind kind) {
  switch (kind) {
    case ModulePattern::Kind::exact:
      return 0;
    case ModulePattern::Kind::regex:
      return 1;
    case ModulePattern::Kind::linear_class:
    case ModulePattern::Kind::wildcard:
      break;
  }
  return 2;
}

class CompressedTensorsRules final : public QuantRules {
 public:
  CompressedTensorsRules(const Json& config, const JsonPath& at) : QuantRules(at) {
    top_format_ = string_member(config, "format", at);
    if (top_format_ && !find_fp4_format(*top_format_) && !is_other_format(*top_format_) &&
        *top_format_ != kMixedPrecision) {
      (at / "format")
          .fail("is '{}', which is not a compressed-tensors format fp4cl knows (its FP4 formats: "
                "nvfp4-pack-quantized, mxfp4-pack-quantized)",
                *top_format_);
    }
    reject_unsupported_features(config, at);
    const JsonPath groups_at = at / "config_groups";
    const Json* groups = object_member(config, "config_groups", at);
    if (!groups || groups->empty()) groups_at.fail("is missing or empty: no module is quantized");
    bool any_fp4 = false;
    for (auto it = groups->begin(); it != groups->end(); ++it) {
      groups_.push_back(read_group(it.key(), it.value(), groups_at / it.key(), at));
      any_fp4 = any_fp4 || groups_.back().outcome.scheme.has_value();
    }
    if (!any_fp4) {
      groups_at.fail("has no group with an FP4 format (nvfp4-pack-quantized, mxfp4-pack-quantized): nothing fp4cl "
                     "can run");
    }
    const JsonPath ignore_at = at / "ignore";
    const std::vector<std::string> ignore = string_list_member(config, "ignore", at);
    for (std::size_t i = 0; i < ignore.size(); ++i) {
      ignore_.push_back(ModulePattern::compressed_tensors(ignore[i], ignore_at[i]));
    }
  }

  QuantProducer producer() const override { return QuantProducer::compressed_tensors; }

  std::string summary() const override { return top_format_.value_or("(formats per config group)"); }

  Decision decide(std::string_view module) const override {
    for (const ModulePattern& p : ignore_) {
      if (p.matches(module)) {
        Decision d;
        d.reason = fmt::format("ignore entry '{}'", p.text());
        return d;
      }
    }
    // Each group claims the module with its most specific matching target.
    struct Claim {
      const Group* group;
      const ModulePattern* target;
      int rank;
    };
    std::vector<Claim> claims;
    for (const Group& g : groups_) {
      const ModulePattern* best = nullptr;
      for (const ModulePattern& t : g.targets) {
        if (t.matches(module) && (!best || specificity(t.kind()) < specificity(best->kind()))) best = &t;
      }
      if (best) claims.push_back({&g, best, specificity(best->kind())});
    }
    if (claims.empty()) {
      Decision d;
      d.reason = "matched by no config_groups target";
      return d;
    }
    int top = INT_MAX;
    for (const Claim& c : claims) top = std::min(top, c.rank);
    const Claim* winner = nullptr;
    for (const Claim& c : claims) {
      if (c.rank != top) continue;
      if (!winner) {
        winner = &c;
      } else if (!(c.group->outcome == winner->group->outcome)) {
        fail("{}: module '{}' is matched equally specifically by config_groups.{} (target '{}', {}) and "
             "config_groups.{} (target '{}', {}); the config must give one scheme per module",
             source(), module, winner->group->name, winner->target->text(), winner->group->outcome.text(),
             c.group->name, c.target->text(), c.group->outcome.text());
      }
    }
    Decision d;
    d.reason = fmt::format("config_groups.{} target '{}'", winner->group->name, winner->target->text());
    if (winner->group->outcome.scheme) {
      d.kind = Decision::Kind::quantized;
      d.scheme = *winner->group->outcome.scheme;
    } else {
      d.kind = Decision::Kind::unsupported;
      d.what = winner->group->outcome.what;
    }
    return d;
  }

 private:
  // Features that change what a module computes; ignoring them would give wrong output.
  static void reject_unsupported_features(const Json& config, const JsonPath& at) {
    if (const Json* t = member(config, "transform_config"); t && !(t->is_object() && t->empty())) {
      (at / "transform_config").fail("is set: online transforms (rotations) are not supported; expected {{}} or null");
    }
    if (const Json* s = object_member(config, "sparsity_config", at); s && !s->empty()) {
      const std::optional<std::string> format = string_member(*s, "format", at / "sparsity_config");
      if (format && *format != "dense") {
        (at / "sparsity_config" / "format").fail("is '{}': sparse checkpoints are not supported", *format);
      }
    }
  }

  Group read_group(const std::string& name, const Json& value, const JsonPath& at, const JsonPath& config_at) const {
    if (value.is_array()) {
      // A preset name mapped to its targets, e.g. "NVFP4": ["Linear"].
      std::optional<Json> preset = fp4_preset(to_upper(name));
      if (!preset) {
        at.fail("is a list of targets for preset scheme '{}', which is not an FP4 preset (NVFP4, NVFP4A16, MXFP4, "
                "MXFP4A16)",
                name);
      }
      (*preset)["targets"] = value;
      return read_group(name, *preset, at, config_at);
    }
    expect_object(value, at);
    Group g;
    g.name = name;
    const JsonPath targets_at = at / "targets";
    const std::vector<std::string> targets = string_list_member(value, "targets", at);
    if (targets.empty()) targets_at.fail("is missing or empty: a config group must name the modules it quantizes");
    for (std::size_t i = 0; i < targets.size(); ++i) {
      g.targets.push_back(ModulePattern::compressed_tensors(targets[i], targets_at[i]));
      if (g.targets.back().kind() == ModulePattern::Kind::exact && looks_like_class_name(targets[i])) {
        log::warn("{} '{}' looks like a module class; fp4cl matches only the class target 'Linear', other targets "
                  "as module names",
                  targets_at[i].where(), targets[i]);
      }
    }
    if (member(value, "output_activations")) {
      (at / "output_activations").fail("is set: output quantization is not supported; expected null");
    }
    const std::optional<std::string> own_format = string_member(value, "format", at);
    const JsonPath format_at = own_format ? at / "format" : config_at / "format";
    const std::optional<std::string> format = own_format ? own_format : top_format_;
    if (!format) format_at.fail("is missing: config group '{}' has no format", name);
    if (*format == kMixedPrecision) {
      format_at.fail("is \"mixed-precision\", which names no format for config group '{}'", name);
    }
    const Json* weights = member(value, "weights");
    if (const Fp4Format* f = find_fp4_format(*format)) {
      if (!weights) (at / "weights").fail("is missing: format {} quantizes weights", f->format);
      check_fp4_weights(read_args(*weights, at / "weights"), *f, at / "weights");
      const Activations acts = read_activations(member(value, "input_activations"), *f, at / "input_activations");
      g.outcome.scheme = QuantScheme{f->weight, acts};
    } else if (is_other_format(*format)) {
      g.outcome.what = fmt::format("compressed-tensors format '{}'", *format);
    } else {
      format_at.fail("is '{}', which is not a compressed-tensors format fp4cl knows (its FP4 formats: "
                     "nvfp4-pack-quantized, mxfp4-pack-quantized)",
                     *format);
    }
    return g;
  }

  std::optional<std::string> top_format_;
  std::vector<Group> groups_;
  std::vector<ModulePattern> ignore_;
};

}  // namespace

std::shared_ptr<const QuantRules> parse_compressed_tensors_config(const Json& config, const JsonPath& at) {
  expect_object(config, at);
  return std::make_shared<CompressedTensorsRules>(config, at);
}

}  // namespace fp4cl::detail
