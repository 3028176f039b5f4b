// inspect_checkpoint(): a checkpoint's layers, grouped, with global-scale ranges and warnings.
#include "fp4cl/checkpoint_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "checkpoint/checkpoint_index.hpp"
#include "checkpoint/module_names.hpp"
#include "prepare/global_scales.hpp"

namespace fp4cl {

void ScaleRange::add(float value) { merge(ScaleRange{value, value}); }

void ScaleRange::merge(const ScaleRange& other) {
  min = std::min(min, other.min);
  max = std::max(max, other.max);
}

namespace {

void add_to(std::optional<ScaleRange>& range, float value) {
  if (range) {
    range->add(value);
  } else {
    range = ScaleRange{value, value};
  }
}

void merge_into(std::optional<ScaleRange>& range, const std::optional<ScaleRange>& other) {
  if (!other) return;
  if (range) {
    range->merge(*other);
  } else {
    range = other;
  }
}

// "0–47", "0–2, 5, 7–9"
std::string number_ranges(const std::vector<std::int64_t>& numbers) {
  std::string out;
  for (std::size_t i = 0; i < numbers.size();) {
    std::size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += i == j ? fmt::format("{}", numbers[i]) : fmt::format("{}–{}", numbers[i], numbers[j]);
    i = j + 1;
  }
  return out;
}

void count_scheme(std::vector<std::pair<QuantScheme, std::size_t>>& schemes, const QuantScheme& scheme) {
  for (auto& [s, n] : schemes) {
    if (s == scheme) {
      ++n;
      return;
    }
  }
  schemes.emplace_back(scheme, 1);
}

class Reporter {
 public:
  Reporter(const Checkpoint& checkpoint, const detail::CheckpointIndex& index) : ckpt_(checkpoint), ix_(index) {}

  CheckpointReport run() {
    CheckpointReport r;
    r.directory = ix_.directory.string();
    r.producer = to_string(ix_.config.producer());
    r.config_source = ix_.config.source();
    r.tensors_source = ix_.model.source();
    r.shards = ix_.model.shards().size();
    r.tensors = ix_.model.size();
    for (const SafetensorsFile& shard : ix_.model.shards()) r.file_bytes += shard.file_size();
    for (const CheckpointLayer& layer : ckpt_.layers()) {
      r.layers.push_back(describe(layer));
      r.quantized_bytes += layer.stored_bytes;
      count_scheme(r.schemes, layer.scheme);
    }
    r.groups = group(r.layers);
    r.unsupported = ix_.unsupported;
    r.warnings = warnings(r);
    return r;
  }

 private:
  // Adds one module's global scales (and, under W4A16, the names of its unread activation scales).
  void add_module(LayerReport& report, const detail::QuantizedModule& m) const {
    if (m.weight_global_scale) {
      add_to(report.weight_global_scale, detail::read_global_scale(*m.weight_global_scale, m.direction).dequant);
    }
    if (m.input_global_scale) {
      add_to(report.input_scale, detail::read_global_scale(*m.input_global_scale, m.direction).dequant);
    }
    if (m.scheme.w4a16()) {
      // Only the name is looked up: a W4A16 layer never reads its activation scales.
      const std::string& suffix =
          ix_.config.layout(QuantScheme{m.scheme.weight, Activations::fp4_dynamic}).input_global_scale;
      if (!suffix.empty()) {
        const std::string name = TensorLayout::tensor_name(m.name, suffix);
        if (ix_.model.contains(name)) report.ignored_activation_scales.push_back(name);
      }
    }
  }

  LayerReport describe(const CheckpointLayer& layer) const {
    LayerReport report;
    report.layer = layer;
    if (layer.kind == LayerKind::linear) {
      const detail::QuantizedModule& m = *ix_.find_module(layer.name);
      add_module(report, m);
      report.biases = m.bias.has_value();
      return report;
    }
    const detail::MoeLayerIndex& moe = *ix_.find_moe(layer.name);
    if (moe.fused) {
      report.biases = moe.fused->gate_up_bias.has_value();
      return report;
    }
    report.biases = true;  // unless a projection has none
    for (const detail::ExpertModules& x : moe.experts) {
      for (const detail::QuantizedModule* m : {x.gate, x.up, x.down}) {
        add_module(report, *m);
        report.biases = report.biases && m->bias;
      }
      if (x.gate->weight_global_scale &&
          detail::read_global_scale(*x.gate->weight_global_scale, x.gate->direction).dequant !=
              detail::read_global_scale(*x.up->weight_global_scale, x.up->direction).dequant) {
        ++report.gate_up_scale_mismatches;
      }
    }
    return report;
  }

  static std::string group_key(const detail::NumberedName& n, const LayerReport& r) {
    const CheckpointLayer& l = r.layer;
    return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", n.pattern, to_string(l.kind), l.scheme.name(), l.out_features,
                       l.in_features, l.num_experts, l.hidden, l.intermediate, l.expert_naming, r.biases);
  }

  static std::vector<LayerGroup> group(const std::vector<LayerReport>& layers) {
    std::vector<LayerGroup> groups;
    std::map<std::string, std::size_t> by_key;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const LayerReport& l = layers[i];
      const detail::NumberedName n = detail::split_layer_number(l.layer.name);
      const auto [it, fresh] = by_key.emplace(group_key(n, l), groups.size());
      if (fresh) {
        LayerGroup g;
        g.pattern = n.pattern;
        g.total = l;
        g.total.layer.stored_bytes = 0;
        g.total.gate_up_scale_mismatches = 0;
        g.total.ignored_activation_scales.clear();
        g.total.weight_global_scale.reset();
        g.total.input_scale.reset();
        groups.push_back(std::move(g));
      }
      LayerGroup& g = groups[it->second];
      g.layers.push_back(i);
      if (n.number) g.numbers.push_back(*n.number);
      g.total.layer.stored_bytes += l.layer.stored_bytes;
      g.total.gate_up_scale_mismatches += l.gate_up_scale_mismatches;
      g.total.ignored_activation_scales.insert(g.total.ignored_activation_scales.end(),
                                               l.ignored_activation_scales.begin(), l.ignored_activation_scales.end());
      merge_into(g.total.weight_global_scale, l.weight_global_scale);
      merge_into(g.total.input_scale, l.input_scale);
    }
    for (LayerGroup& g : groups) std::sort(g.numbers.begin(), g.numbers.end());
    return groups;
  }

  std::vector<std::string> warnings(const CheckpointReport& r) const {
    std::vector<std::string> out;
    if (r.layers.empty()) out.push_back("no FP4-quantized layer found: nothing for fp4cl to load");
    for (const LayerGroup& g : r.groups) {
      const LayerReport& t = g.total;
      if (t.gate_up_scale_mismatches > 0) {
        out.push_back(fmt::format(
            "{}: gate and up projections have different weight global scales in {} of {} "
            "experts; each is kept exactly (w13_global_scale is [E, 2])",
            g.label(), t.gate_up_scale_mismatches, t.layer.num_experts * static_cast<std::int64_t>(g.layers.size())));
      }
      if (!t.ignored_activation_scales.empty()) {
        out.push_back(fmt::format(
            "{}: {}, yet the checkpoint carries {} activation-scale tensors (e.g. '{}'); they "
            "are ignored, never read: a W4A16 layer keeps BF16 activations",
            g.label(), t.layer.scheme.name(), t.ignored_activation_scales.size(), t.ignored_activation_scales.front()));
      }
    }
    if (!r.unsupported.empty()) {
      out.push_back(fmt::format("{} quantized modules cannot be run by fp4cl and are not loaded, e.g. '{}': {}",
                                r.unsupported.size(), r.unsupported.front().module, r.unsupported.front().reason));
    }
    return out;
  }

  const Checkpoint& ckpt_;
  const detail::CheckpointIndex& ix_;
};

}  // namespace

std::string LayerGroup::label() const {
  if (numbers.empty()) return pattern;
  const std::string numbers_text = number_ranges(numbers);
  const std::size_t at = pattern.find("{}");
  const std::string inner = numbers.size() == 1 ? numbers_text : "{" + numbers_text + "}";
  return pattern.substr(0, at) + inner + pattern.substr(at + 2);
}

CheckpointReport inspect_checkpoint(const Checkpoint& checkpoint) {
  return Reporter(checkpoint, *checkpoint.index_).run();
}

}  // namespace fp4cl
