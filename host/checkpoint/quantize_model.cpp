// fp4cl::quantize_model: a BF16/F32 safetensors model directory → an NVFP4/MXFP4 checkpoint in
// the ModelOpt or compressed-tensors layout (FP4.md §3–§5). Tensor names come from
// tensor_layout(), the table the reader uses, so reader and writer cannot disagree.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "checkpoint/activation_calibration.hpp"
#include "checkpoint/module_names.hpp"
#include "checkpoint/module_pattern.hpp"
#include "checkpoint/quant_config_writer.hpp"
#include "checkpoint/staged_model_directory.hpp"
#include "checkpoint/strict_json.hpp"
#include "checkpoint/weight_quantizer.hpp"
#include "fp4cl/model_writer.hpp"
#include "support/check.hpp"
#include "support/log.hpp"
#include "support/text.hpp"

namespace fp4cl {

namespace fs = std::filesystem;

namespace {

constexpr float kFp4TimesE4m3Max = 2688.0f;  // 6 · 448

bool matches_any(const std::string& module, const std::vector<std::string>& patterns) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return detail::fnmatch(module, p); });
}

// Embedding tables are 2-D ".weight" tensors but not linear layers: never quantized, never listed
// in `ignore` (compressed-tensors' "Linear" target does not reach them).
bool is_embedding(const std::string& module) {
  const std::size_t dot = module.rfind('.');
  const std::string last = dot == std::string::npos ? module : module.substr(dot + 1);
  return last.find("embed") != std::string::npos;
}

// Files that hold weights (replaced by ours) or configs we rewrite are not copied.
bool is_copied_file(const fs::path& file) {
  const std::string name = file.filename().string();
  if (name.empty() || name[0] == '.') return false;
  if (name == "config.json" || name == "hf_quant_config.json" || ends_with(name, ".index.json")) return false;
  for (const char* ext : {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf"}) {
    if (ends_with(name, ext)) return false;
  }
  return true;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("cannot read '{}'", file.string());
  std::ostringstream s;
  s << in.rdbuf();
  if (!in.good() && !in.eof()) fail("cannot read '{}'", file.string());
  return s.str();
}

// What happens to one linear module.
struct Linear {
  std::string module;
  TensorView weight;
};

struct Plan {
  std::vector<Linear> quantize;
  std::vector<std::string> ignored;  // linear modules kept as they are
  std::vector<std::string> copied;   // tensors written unchanged
  std::uint64_t quantize_bytes = 0;
};

Plan plan_model(const SafetensorsModel& model, const QuantizeOptions& o, const TensorLayout& layout) {
  Plan plan;
  for (const std::string& name : model.names()) {
    const TensorView view = model.tensor(name);
    const bool linear_weight = ends_with(name, ".weight") && view.shape().size() == 2;
    const std::string module = linear_weight ? name.substr(0, name.size() - 7) : std::string();
    if (!linear_weight || is_embedding(module)) {
      plan.copied.push_back(name);
      continue;
    }
    if (matches_any(module, o.include) && !matches_any(module, o.exclude)) {
      plan.quantize.push_back({module, view});
      plan.quantize_bytes += view.info().size_bytes();
    } else {
      plan.ignored.push_back(module);
      plan.copied.push_back(name);
    }
  }
  if (plan.quantize.empty()) {
    fail("no linear module of '{}' matches the include patterns [{}] (minus the exclude patterns [{}]): "
         "nothing to quantize",
         model.source(), fmt::join(o.include, ", "), fmt::join(o.exclude, ", "));
  }
  // A tensor we would write must not exist already (other than the weight ModelOpt replaces).
  for (const Linear& l : plan.quantize) {
    for (const std::string* suffix :
         {&layout.weight, &layout.weight_scale, &layout.weight_global_scale, &layout.input_global_scale}) {
      if (suffix->empty() || *suffix == "weight") continue;
      const std::string name = TensorLayout::tensor_name(l.module, *suffix);
      if (model.contains(name)) {
        fail("'{}' already holds '{}': the model looks quantized already; quantize a BF16/F32 model",
             model.source(), name);
      }
    }
  }
  return plan;
}

std::vector<std::uint8_t> f32_bytes(float value) {
  std::vector<std::uint8_t> bytes(4);
  std::memcpy(bytes.data(), &value, 4);
  return bytes;
}

// Scales for an activation amax in the producer's direction: dequant amax/(448·6) or quant
// 448·6/amax. An all-zero calibration (amax 0) gives the neutral scale 1.
float input_scale(float amax, ScaleDirection direction, const std::string& module) {
  if (amax == 0.0f) return 1.0f;
  const float scale =
      direction == ScaleDirection::dequant ? amax / kFp4TimesE4m3Max : kFp4TimesE4m3Max / amax;
  if (!std::isfinite(scale) || scale == 0.0f) {
    fail("'{}': activation amax {} gives no finite FP32 input scale", module, amax);
  }
  return scale;
}

// Adds the tensors of one quantized module (FP4.md §5); returns their size in bytes.
std::uint64_t add_quantized(SafetensorsWriter& writer, const Linear& l, const QuantizeOptions& o,
                            const TensorLayout& layout, std::optional<float> input_amax) {
  const std::string weight_name = l.weight.name();
  const std::vector<float> values = detail::weight_values(l.weight);
  const std::int64_t rows = l.weight.shape()[0], cols = l.weight.shape()[1];
  const bool nvfp4 = o.scheme.weight == WeightFormat::nvfp4;
  const float gs_quant = nvfp4 ? detail::nvfp4_global_scale(detail::tensor_amax(values), weight_name) : 1.0f;
  QuantizedRows q = detail::quantize_weight(o.scheme.weight, values, rows, cols, gs_quant, weight_name);
  std::uint64_t bytes = q.packed.size() + q.scales.size();

  // ModelOpt stores scalars ([]), compressed-tensors one-element vectors ([1]).
  const std::vector<std::int64_t> scalar_shape =
      o.layout == QuantProducer::modelopt ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{1};
  writer.add(TensorLayout::tensor_name(l.module, layout.weight), Dtype::u8, {rows, cols / 2},
             std::move(q.packed));
  writer.add(TensorLayout::tensor_name(l.module, layout.weight_scale), nvfp4 ? Dtype::f8_e4m3 : Dtype::u8,
             {rows, q.scale_cols()}, std::move(q.scales));
  if (!layout.weight_global_scale.empty()) {
    const float stored = layout.global_scale_direction == ScaleDirection::dequant ? q.global_scale : gs_quant;
    writer.add(TensorLayout::tensor_name(l.module, layout.weight_global_scale), Dtype::f32, scalar_shape,
               f32_bytes(stored));
    bytes += 4;
  }
  if (!layout.input_global_scale.empty()) {
    if (!input_amax) fail("internal error: no activation amax for '{}'", l.module);
    writer.add(TensorLayout::tensor_name(l.module, layout.input_global_scale), Dtype::f32, scalar_shape,
               f32_bytes(input_scale(*input_amax, layout.global_scale_direction, l.module)));
    bytes += 4;
  }
  return bytes;
}

void check_options(const QuantizeOptions& o) {
  if (o.layout == QuantProducer::gpt_oss)
    fail("quantize: fp4cl writes the ModelOpt and compressed-tensors layouts, not gpt-oss's fused MXFP4 experts");
  if (o.layout == QuantProducer::modelopt && o.scheme.weight == WeightFormat::mxfp4) {
    fail("ModelOpt has no {} checkpoint layout that fp4cl writes (FP4.md §5 defines ModelOpt NVFP4 and "
         "W4A16 NVFP4); use the compressed-tensors layout for MXFP4",
         o.scheme.name());
  }
  if (o.include.empty()) fail("quantize: no include pattern: nothing would be quantized");
  if (o.input_amax && !(std::isfinite(*o.input_amax) && *o.input_amax > 0.0f)) {
    fail("quantize: input amax {} must be a finite positive number", *o.input_amax);
  }
  if (o.calibration_rows <= 0) fail("quantize: calibration rows = {} must be positive", o.calibration_rows);
}

}  // namespace

QuantizeSummary quantize_model(const fs::path& input, const fs::path& output, const QuantizeOptions& o,
                               const ModelOutputOptions& out_options) {
  check_options(o);
  const TensorLayout layout = tensor_layout(o.layout, o.scheme);
  std::error_code ec;
  if (!fs::is_directory(input, ec)) fail("input model '{}' is not a directory", input.string());
  if (fs::exists(output, ec)) {
    // Replacing the output must never delete the input.
    const fs::path in = fs::canonical(input, ec), out = fs::canonical(output, ec);
    const bool out_contains_in = std::mismatch(out.begin(), out.end(), in.begin(), in.end()).first == out.end();
    if (!ec && out_contains_in) {
      fail("the output '{}' is or contains the input model directory '{}'; write the checkpoint elsewhere",
           output.string(), input.string());
    }
  }
  const fs::path config_path = input / "config.json";
  if (!fs::exists(config_path, ec)) fail("input model '{}' has no config.json", input.string());
  if (fs::exists(input / "hf_quant_config.json", ec)) {
    fail("input model '{}' has hf_quant_config.json: it is quantized already", input.string());
  }
  const std::string config_text = read_text(config_path);
  parse_strict_json(config_text, config_path.string());  // validates: UTF-8, duplicate keys
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(config_text);
  if (!config.is_object()) fail("{}: expected a JSON object", config_path.string());
  if (config.contains("quantization_config")) {
    fail("{} has a quantization_config: the model is quantized already", config_path.string());
  }

  const SafetensorsModel model = SafetensorsModel::open(input.string());
  const Plan plan = plan_model(model, o, layout);
  detail::StagedModelDirectory out(output, out_options.overwrite);

  const bool calibrate = !layout.input_global_scale.empty() && !o.input_amax;
  std::optional<detail::ActivationCalibration> calibration;
  if (calibrate) calibration.emplace(model, o.calibration_rows, o.calibration_seed);

  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  std::uint64_t total_bytes = 0, done = 0;
  QuantizeSummary summary;
  for (const Linear& l : plan.quantize) {
    std::optional<float> amax = o.input_amax;
    if (calibrate) amax = calibration->input_amax(l.module, l.weight.shape()[1]);
    total_bytes += add_quantized(writer, l, o, layout, amax);
    summary.quantized.push_back(l.module);
    done += l.weight.info().size_bytes();
    if (out_options.progress) out_options.progress({"quantizing", done, plan.quantize_bytes});
  }
  for (const std::string& name : plan.copied) writer.add(model.tensor(name));
  summary.copied_tensors = plan.copied.size();
  summary.ignored = plan.ignored;
  std::sort(summary.ignored.begin(), summary.ignored.end(), detail::natural_less);
  std::sort(summary.quantized.begin(), summary.quantized.end(), detail::natural_less);

  const detail::ProducerQuantConfig qc = detail::producer_quant_config(o.layout, o.scheme, plan.ignored);
  config["quantization_config"] = qc.quantization_config;
  out.write_text("config.json", config.dump(2) + "\n");
  summary.files.push_back("config.json");
  if (qc.hf_quant_config) {
    out.write_text("hf_quant_config.json", qc.hf_quant_config->dump(4) + "\n");
    summary.files.push_back("hf_quant_config.json");
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(input)) {
    if (entry.is_regular_file() && is_copied_file(entry.path())) {
      out.copy_file(entry.path());
      summary.files.push_back(entry.path().filename().string());
    } else if (entry.is_directory()) {
      log::info("quantize: not copying the subdirectory '{}'", entry.path().string());
    }
  }

  for (const std::string& name : plan.copied) total_bytes += model.tensor(name).info().size_bytes();
  if (out_options.progress) out_options.progress({"writing", 0, total_bytes});
  const std::vector<std::string> tensor_files =
      out.write_tensors(writer, total_bytes, out_options.max_shard_bytes);
  summary.files.insert(summary.files.end(), tensor_files.begin(), tensor_files.end());
  out.commit();
  if (out_options.progress) out_options.progress({"writing", total_bytes, total_bytes});
  return summary;
}

QuantScheme quant_scheme_from_name(std::string_view name) {
  const std::string n = to_lower(name);
  if (n == "nvfp4") return {WeightFormat::nvfp4, Activations::fp4_dynamic};
  if (n == "nvfp4a16") return {WeightFormat::nvfp4, Activations::bf16};
  if (n == "mxfp4") return {WeightFormat::mxfp4, Activations::fp4_dynamic};
  if (n == "mxfp4a16") return {WeightFormat::mxfp4, Activations::bf16};
  fail("unknown quantization scheme '{}': expected nvfp4, nvfp4a16, mxfp4 or mxfp4a16", name);
}

QuantProducer quant_producer_from_name(std::string_view name) {
  const std::string n = to_lower(name);
  if (n == "modelopt") return QuantProducer::modelopt;
  if (n == "compressed-tensors") return QuantProducer::compressed_tensors;
  fail("unknown checkpoint layout '{}': expected modelopt or compressed-tensors", name);
}

}  // namespace fp4cl
