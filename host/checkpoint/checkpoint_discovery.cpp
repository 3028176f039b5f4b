// Checkpoint discovery: which modules a model directory quantizes, bound to their tensors, and
// the MoE layers their expert projections form, checked for completeness and consistent sizes.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_index.hpp"
#include "checkpoint/json_access.hpp"
#include "checkpoint/module_names.hpp"
#include "support/check.hpp"

namespace fp4cl::detail {

const QuantizedModule* CheckpointIndex::find_module(std::string_view name) const {
  const auto it = module_by_name.find(name);
  return it == module_by_name.end() ? nullptr : &modules[it->second];
}

const MoeLayerIndex* CheckpointIndex::find_moe(std::string_view name_or_prefix) const {
  for (const MoeLayerIndex& m : moe) {
    if (m.name == name_or_prefix) return &m;
  }
  const MoeLayerIndex* found = nullptr;
  for (const MoeLayerIndex& m : moe) {
    if (m.prefix != name_or_prefix || m.prefix.empty()) continue;
    if (found) {
      fail("'{}' has two MoE layers, '{}' and '{}'; name the one to load", name_or_prefix, found->name, m.name);
    }
    found = &m;
  }
  return found;
}

namespace {

// "<module>.<suffix>" → module.
std::optional<std::string_view> module_of(std::string_view tensor, std::string_view suffix) {
  if (suffix.empty() || tensor.size() <= suffix.size() + 1) return std::nullopt;
  const std::size_t dot = tensor.size() - suffix.size() - 1;
  if (tensor[dot] != '.' || tensor.compare(dot + 1, suffix.size(), suffix) != 0) return std::nullopt;
  return tensor.substr(0, dot);
}

// The modules whose tensors say they are quantized (FP4.md §5; the rule is in checkpoint.hpp):
// a compressed-tensors `.weight_packed`, a ModelOpt U8 `.weight`, or either producer's block
// scale or weight global scale. Mapped to one of their tensors, for messages.
std::map<std::string, std::string> quantized_candidates(const SafetensorsModel& model, const QuantConfig& config) {
  // gpt-oss quantizes no module on its own: its MXFP4 tensors are fused experts (fused_layers()).
  if (config.producer() == QuantProducer::gpt_oss) return {};
  const TensorLayout layout = config.layout(QuantScheme{WeightFormat::nvfp4, Activations::fp4_dynamic});
  // ModelOpt's weight suffix ".weight" is also every unquantized module's: U8 only.
  const bool weight_suffix_shared = config.producer() == QuantProducer::modelopt;
  std::map<std::string, std::string> found;
  for (const SafetensorsFile& shard : model.shards()) {
    for (const TensorInfo& t : shard.tensors()) {
      if (const std::optional<std::string_view> module = module_of(t.name, layout.weight)) {
        if (!weight_suffix_shared || t.dtype == Dtype::u8) found[std::string(*module)] = t.name;  // named first
        continue;
      }
      std::optional<std::string_view> module = module_of(t.name, layout.weight_scale);
      if (!module) module = module_of(t.name, layout.weight_global_scale);
      if (module) found.emplace(std::string(*module), t.name);
    }
  }
  return found;
}

// config.json's routed-expert count, when it states one.
struct ExpectedExperts {
  std::int64_t count = 0;
  std::string source;  // "/m/config.json: num_experts"
};

std::optional<ExpectedExperts> expected_expert_count(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  const Json config = read_json_file(file);
  if (!config.is_object()) return std::nullopt;
  constexpr std::string_view kKeys[] = {"num_experts", "num_local_experts", "n_routed_experts"};
  const JsonPath root(file.string(), "");
  std::vector<std::pair<const Json*, JsonPath>> places{{&config, root}};
  if (const Json* text = object_member(config, "text_config", root)) places.emplace_back(text, root / "text_config");
  for (const auto& [object, at] : places) {
    for (std::string_view key : kKeys) {
      const std::optional<std::int64_t> n = integer_member(*object, key, at);
      if (n && *n > 0) return ExpectedExperts{*n, (at / key).where()};
    }
  }
  return std::nullopt;
}

// Collects one MoE layer's expert projections as discovery meets them.
struct MoeBuilder {
  std::string name, prefix;
  const ExpertNaming* naming = nullptr;
  std::map<std::int64_t, std::array<std::optional<std::size_t>, 3>> experts;  // e → gate, up, down
};

std::string expert_ranges(const std::map<std::int64_t, std::array<std::optional<std::size_t>, 3>>& experts) {
  std::string out;
  for (auto it = experts.begin(); it != experts.end();) {
    const std::int64_t first = it->first;
    std::int64_t last = first;
    for (++it; it != experts.end() && it->first == last + 1; ++it) last = it->first;
    if (!out.empty()) out += ", ";
    out += first == last ? fmt::format("{}", first) : fmt::format("{}–{}", first, last);
  }
  return out;
}

class Discovery {
 public:
  explicit Discovery(CheckpointIndex& index) : ix_(index) {}

  void run() {
    bind_modules();
    group_layers();
  }

 private:
  std::string weight_tensor(std::string_view module, const QuantScheme& scheme) const {
    return TensorLayout::tensor_name(module, ix_.config.layout(scheme).weight);
  }

  // The config's scheme for `module`, whose tensor `tensor` says it is `stored` ("quantized
  // tensors"); nullopt, with the module listed as unsupported, where the config cannot run it or
  // leaves it unquantized.
  std::optional<QuantScheme> resolve_or_list(const std::string& module, const std::string& tensor,
                                             const char* stored) {
    std::optional<QuantScheme> scheme;
    try {
      scheme = ix_.config.resolve(module);
    } catch (const Error& e) {
      ix_.unsupported.push_back({module, e.what()});
      return std::nullopt;
    }
    if (!scheme)
      ix_.unsupported.push_back(
          {module, fmt::format("{} leaves it unquantized ({}), but the checkpoint stores {} for it ('{}' in '{}')",
                               ix_.config.source(), ix_.config.explain(module), stored, tensor,
                               ix_.model.tensor(tensor).file())});
    return scheme;
  }

  void bind_modules() {
    std::map<std::string, std::string> candidates = quantized_candidates(ix_.model, ix_.config);
    std::vector<std::string> names;
    for (const auto& [module, tensor] : candidates) names.push_back(module);
    std::sort(names.begin(), names.end(),
              [](const std::string& a, const std::string& b) { return natural_less(a, b); });
    ix_.modules.reserve(names.size());
    for (const std::string& module : names) {
      const std::optional<QuantScheme> scheme = resolve_or_list(module, candidates[module], "quantized tensors");
      if (!scheme) continue;
      ix_.module_by_name.emplace(module, ix_.modules.size());
      ix_.modules.push_back(bind_quantized_module(ix_.model, ix_.config, module, *scheme));
    }
  }

  void group_layers() {
    std::map<std::string, MoeBuilder> moe;
    for (std::size_t i = 0; i < ix_.modules.size(); ++i) {
      const QuantizedModule& m = ix_.modules[i];
      if (std::optional<ExpertModuleName> e = parse_expert_module(m.name)) {
        MoeBuilder& b = moe[e->layer];
        b.name = e->layer;
        b.prefix = e->prefix;
        b.naming = e->naming;
        b.experts[e->expert][static_cast<std::size_t>(e->projection)] = i;
      } else {
        CheckpointLayer layer;
        layer.name = m.name;
        layer.kind = LayerKind::linear;
        layer.scheme = m.scheme;
        layer.out_features = m.n;
        layer.in_features = m.k;
        layer.stored_bytes = m.stored_bytes();
        ix_.layers.push_back(std::move(layer));
      }
    }
    for (const UnsupportedModule& u : ix_.unsupported) {
      const std::optional<ExpertModuleName> e = parse_expert_module(u.module);
      if (e && moe.count(e->layer)) {
        fail(
            "MoE layer '{}': expert {}'s {} projection '{}' cannot be loaded ({}), while other experts of the layer "
            "are FP4; an MoE layer must be quantized as a whole",
            e->layer, e->expert, to_string(e->projection), u.module, u.reason);
      }
    }
    const std::optional<ExpectedExperts> expected = moe.empty() ? std::nullopt : expected_expert_count(ix_.directory);
    std::vector<std::string> names;
    for (const auto& [name, b] : moe) names.push_back(name);
    std::sort(names.begin(), names.end(),
              [](const std::string& a, const std::string& b) { return natural_less(a, b); });
    ix_.moe.reserve(names.size());
    for (const std::string& name : names) ix_.moe.push_back(build_moe(moe[name], expected));
    fused_layers();
    std::stable_sort(ix_.moe.begin(), ix_.moe.end(),
                     [](const MoeLayerIndex& a, const MoeLayerIndex& b) { return natural_less(a.name, b.name); });
    for (const MoeLayerIndex& m : ix_.moe) ix_.layers.push_back(m.fused ? describe_fused(*m.fused) : describe_moe(m));
    std::stable_sort(ix_.layers.begin(), ix_.layers.end(),
                     [](const CheckpointLayer& a, const CheckpointLayer& b) { return natural_less(a.name, b.name); });
  }

  MoeLayerIndex build_moe(const MoeBuilder& b, const std::optional<ExpectedExperts>& expected) const {
    const std::int64_t count = b.experts.rbegin()->first + 1;
    const QuantScheme scheme = some_module(b).scheme;
    auto missing_tensor = [&](std::int64_t e, ExpertProjection p) {
      return weight_tensor(b.naming->module(b.name, e, p), scheme);
    };
    if (expected && expected->count > count) {
      fail(
          "MoE layer '{}': {} says {} experts, but the checkpoint has experts {} (expected 0–{}): no tensor '{}' in {}",
          b.name, expected->source, expected->count, expert_ranges(b.experts), expected->count - 1,
          missing_tensor(count, ExpertProjection::gate), ix_.model.source());
    }
    if (expected && expected->count < count) {
      fail("MoE layer '{}': {} says {} experts, but the checkpoint has experts {}, e.g. tensor '{}'", b.name,
           expected->source, expected->count, expert_ranges(b.experts), some_module(b, count - 1).weight.name());
    }
    MoeLayerIndex layer;
    layer.name = b.name;
    layer.prefix = b.prefix;
    layer.naming = b.naming;
    for (std::int64_t e = 0; e < count; ++e) {
      const auto it = b.experts.find(e);
      if (it == b.experts.end()) {
        fail(
            "MoE layer '{}': expert {} is missing (the checkpoint has experts {}; expected 0–{}): no tensor '{}' in {}",
            b.name, e, expert_ranges(b.experts), count - 1, missing_tensor(e, ExpertProjection::gate),
            ix_.model.source());
      }
      ExpertModules x;
      const QuantizedModule** slots[] = {&x.gate, &x.up, &x.down};
      for (std::size_t p = 0; p < 3; ++p) {
        const auto projection = static_cast<ExpertProjection>(p);
        if (!it->second[p]) {
          fail("MoE layer '{}': expert {} has no quantized {} projection: expected tensor '{}' in {}", b.name, e,
               to_string(projection), missing_tensor(e, projection), ix_.model.source());
        }
        *slots[p] = &ix_.modules[*it->second[p]];
      }
      check_expert(layer, e, x);
      layer.experts.push_back(x);
    }
    return layer;
  }

  // gpt-oss's MoE layers, stored as fused expert tensors (checkpoint/fused_experts.hpp); the
  // config decides their scheme as for any module, by the experts container's name.
  void fused_layers() {
    std::vector<std::string> names = fused_expert_layers(ix_.model);
    if (names.empty()) return;
    const std::optional<ExpectedExperts> expected = expected_expert_count(ix_.directory);
    for (const std::string& name : names) {
      if (ix_.find_moe(name)) fail("MoE layer '{}' has both per-expert modules and fused expert tensors", name);
      const std::optional<QuantScheme> scheme =
          resolve_or_list(name, name + ".gate_up_proj_blocks", "fused MXFP4 experts");
      if (!scheme) continue;
      MoeLayerIndex layer;
      layer.name = name;
      // "model.layers.3.mlp.experts" → "model.layers.3" (gpt-oss's container is Qwen3's).
      layer.prefix = container_prefix(name, "mlp.experts").value_or(std::string());
      layer.fused = bind_fused_experts(ix_.model, name, *scheme);
      if (expected && expected->count != layer.fused->experts)
        fail("MoE layer '{}': {} says {} experts, but tensor '{}' in '{}' holds {}", name, expected->source,
             expected->count, layer.fused->gate_up_blocks.name(), layer.fused->gate_up_blocks.file(),
             layer.fused->experts);
      ix_.moe.push_back(std::move(layer));
    }
  }

  static CheckpointLayer describe_fused(const FusedExperts& f) {
    CheckpointLayer layer;
    layer.name = f.layer;
    layer.kind = LayerKind::moe;
    layer.scheme = f.scheme;
    layer.num_experts = f.experts;
    layer.hidden = f.hidden;
    layer.intermediate = f.intermediate;
    layer.expert_naming = "gpt-oss (fused experts)";
    layer.stored_bytes = f.stored_bytes();
    return layer;
  }

  // A projection module of expert `e` (default: the first expert present).
  const QuantizedModule& some_module(const MoeBuilder& b, std::int64_t e = -1) const {
    const auto it = e < 0 ? b.experts.begin() : b.experts.find(e);
    for (const std::optional<std::size_t>& slot : it->second) {
      if (slot) return ix_.modules[*slot];
    }
    fail("MoE layer '{}': expert {} has no projection", b.name, it->first);  // unreachable: entries have one
  }

  // Expert e against the layer's first expert: one scheme, gate [I, H] = up, down [H, I].
  void check_expert(const MoeLayerIndex& layer, std::int64_t e, const ExpertModules& x) const {
    const ExpertModules& first = layer.experts.empty() ? x : layer.experts.front();
    for (const QuantizedModule* m : {x.gate, x.up, x.down}) {
      if (m->scheme != first.gate->scheme) {
        fail("MoE layer '{}': '{}' is {} but '{}' is {}; expected one scheme for all experts", layer.name, m->name,
             m->scheme.name(), first.gate->name, first.gate->scheme.name());
      }
    }
    if (x.up->n != x.gate->n || x.up->k != x.gate->k) {
      fail(
          "MoE layer '{}' expert {}: up projection weight '{}' in '{}' is [{}, {}] but gate projection weight '{}' "
          "is [{}, {}] (as unpacked [out, in] features); expected equal sizes [I, H]",
          layer.name, e, x.up->weight.name(), x.up->weight.file(), x.up->n, x.up->k, x.gate->weight.name(), x.gate->n,
          x.gate->k);
    }
    if (x.down->n != x.gate->k || x.down->k != x.gate->n) {
      fail(
          "MoE layer '{}' expert {}: down projection weight '{}' in '{}' is [{}, {}] (unpacked [out, in]); expected "
          "[H, I] = [{}, {}], the transpose of the gate projection's [I, H]",
          layer.name, e, x.down->weight.name(), x.down->weight.file(), x.down->n, x.down->k, x.gate->k, x.gate->n);
    }
    if (x.gate->n != first.gate->n || x.gate->k != first.gate->k) {
      fail(
          "MoE layer '{}': expert {}'s gate projection weight '{}' in '{}' is [{}, {}] but expert 0's is [{}, {}]; "
          "expected every expert to have the same sizes",
          layer.name, e, x.gate->weight.name(), x.gate->weight.file(), x.gate->n, x.gate->k, first.gate->n,
          first.gate->k);
    }
  }

  static CheckpointLayer describe_moe(const MoeLayerIndex& m) {
    const ExpertModules& first = m.experts.front();
    CheckpointLayer layer;
    layer.name = m.name;
    layer.kind = LayerKind::moe;
    layer.scheme = first.gate->scheme;
    layer.num_experts = static_cast<std::int64_t>(m.experts.size());
    layer.hidden = first.gate->k;
    layer.intermediate = first.gate->n;
    layer.expert_naming = std::string(m.naming->convention);
    for (const ExpertModules& x : m.experts) {
      layer.stored_bytes += x.gate->stored_bytes() + x.up->stored_bytes() + x.down->stored_bytes();
    }
    return layer;
  }

  CheckpointIndex& ix_;
};

}  // namespace

std::shared_ptr<const CheckpointIndex> discover_checkpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    fail("checkpoint '{}' does not exist or is not a directory (expected a model directory)", dir.string());
  }
  QuantConfig config = QuantConfig::load(dir);  // first: its errors say more about a wrong directory
  SafetensorsModel model = SafetensorsModel::open(dir.string());
  auto index = std::make_shared<CheckpointIndex>(dir, std::move(config), std::move(model));
  Discovery(*index).run();
  return index;
}

}  // namespace fp4cl::detail
