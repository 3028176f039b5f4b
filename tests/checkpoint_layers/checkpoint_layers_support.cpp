#include "checkpoint_layers/checkpoint_layers_support.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "common/formats.cl"
#include "fp4cl/safetensors.hpp"
#include "reference/linear_reference.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {

namespace {

TempDir& models_dir() {
  static TempDir dir("fp4cl-checkpoint-layers");
  return dir;
}

template <typename T>
cl::Buffer device_copy(const std::vector<T>& v) {
  const Context& ctx = shared_context();
  cl_int err = CL_SUCCESS;
  cl::Buffer b(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
               std::max<std::size_t>(4, v.size() * sizeof(T)), const_cast<T*>(v.data()), &err);
  EXPECT_EQ(err, CL_SUCCESS);
  return b;
}

}  // namespace

SyntheticModelOptions source_model_options() {
  SyntheticModelOptions o;
  o.seed = 5;
  o.layers = 1;
  o.hidden = 64;
  o.intermediate = 32;
  o.experts = 4;
  o.experts_per_token = 2;
  o.heads = 2;
  o.kv_heads = 1;
  o.head_dim = 32;
  o.vocab = 32;
  return o;
}

const std::filesystem::path& source_model() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path p = models_dir().path() / "source";
    write_synthetic_model(p, source_model_options());
    return p;
  }();
  return dir;
}

std::string variant_name(const Variant& v) {
  std::string name = std::string(v.layout == QuantProducer::modelopt ? "ModelOpt" : "CompressedTensors") + "_" +
                     (v.scheme.weight == WeightFormat::nvfp4 ? "NVFP4" : "MXFP4") +
                     (v.scheme.w4a16() ? "_W4A16" : "_W4A4");
  if (v.input_amax) name += fmt::format("_amax{}", static_cast<int>(*v.input_amax * 1000));
  return name;
}

const std::filesystem::path& quantized_model(const Variant& v) {
  static std::map<std::string, std::filesystem::path> written;
  const std::string name = variant_name(v);
  auto it = written.find(name);
  if (it == written.end()) {
    QuantizeOptions o;
    o.scheme = v.scheme;
    o.layout = v.layout;
    o.input_amax = v.input_amax;
    const std::filesystem::path out = models_dir().path() / name;
    quantize_model(source_model(), out, o);
    it = written.emplace(name, out).first;
  }
  return it->second;
}

std::vector<Variant> every_layout_and_scheme() {
  const QuantScheme nv{WeightFormat::nvfp4, Activations::fp4_dynamic}, nv16{WeightFormat::nvfp4, Activations::bf16},
      mx{WeightFormat::mxfp4, Activations::fp4_dynamic}, mx16{WeightFormat::mxfp4, Activations::bf16};
  return {{QuantProducer::modelopt, nv, {}},           {QuantProducer::modelopt, nv16, {}},
          {QuantProducer::compressed_tensors, nv, {}}, {QuantProducer::compressed_tensors, nv16, {}},
          {QuantProducer::compressed_tensors, mx, {}}, {QuantProducer::compressed_tensors, mx16, {}}};
}

void copy_checkpoint(const std::filesystem::path& from, const std::filesystem::path& to,
                     const std::function<void(SafetensorsWriter&, const SafetensorsFile&)>& add) {
  std::filesystem::create_directories(to);
  for (const auto& entry : std::filesystem::directory_iterator(from))
    if (entry.path().extension() == ".json") std::filesystem::copy_file(entry.path(), to / entry.path().filename());
  const SafetensorsFile file = SafetensorsFile::open((from / "model.safetensors").string());
  SafetensorsWriter writer;
  for (const TensorInfo& t : file.tensors()) writer.add(file.tensor(t.name));
  add(writer, file);
  writer.write((to / "model.safetensors").string());
}

void copy_with_extra_tensors(const std::filesystem::path& from, const std::filesystem::path& to,
                             const std::map<std::string, float>& extra, bool scalar_shape) {
  copy_checkpoint(from, to, [&](SafetensorsWriter& writer, const SafetensorsFile&) {
    for (const auto& [name, value] : extra)
      writer.add(name, scalar_shape ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{1},
                 std::vector<float>{value});
  });
}

std::filesystem::path deepseek_checkpoint(const std::filesystem::path& to, const std::vector<float>* bias, Dtype dtype,
                                          std::vector<std::int64_t> shape) {
  const std::filesystem::path from =
      quantized_model({QuantProducer::compressed_tensors, {WeightFormat::nvfp4, Activations::fp4_dynamic}, {}});
  copy_checkpoint(from, to, [&](SafetensorsWriter& writer, const SafetensorsFile&) {
    if (!bias) return;
    const std::string name = "model.layers.0.mlp.gate.e_score_correction_bias";
    if (dtype == Dtype::bf16) {
      std::vector<std::uint16_t> bits;
      for (float v : *bias) bits.push_back(static_cast<std::uint16_t>(float_to_bf16(v)));
      writer.add(name, Dtype::bf16, shape, bits.data(), bits.size() * 2);
    } else {
      writer.add(name, shape, *bias);
    }
  });
  nlohmann::json config = nlohmann::json::parse(std::ifstream(to / "config.json"));
  config["model_type"] = "deepseek_v3";
  config["scoring_func"] = "sigmoid";
  config["topk_method"] = "noaux_tc";
  config["n_group"] = 2;
  config["topk_group"] = 1;
  config["routed_scaling_factor"] = 2.5;
  std::ofstream(to / "config.json") << config.dump(2);
  return to;
}

std::filesystem::path with_shared_expert(const std::filesystem::path& from, const std::filesystem::path& to,
                                         int parts) {
  copy_checkpoint(from, to, [parts](SafetensorsWriter& writer, const SafetensorsFile& file) {
    const std::string expert = "model.layers.0.mlp.experts.1.";
    for (const TensorInfo& t : file.tensors()) {
      if (t.name.rfind(expert, 0) != 0) continue;
      const std::string name = "model.layers.0.mlp.shared_experts." + t.name.substr(expert.size());
      const TensorView view = file.tensor(t.name);
      if (parts == 1 || t.shape.size() != 2) {  // global scales: the same for every part
        writer.add(name, view);
        continue;
      }
      // Part j: expert 1's rows, in reverse order for odd j (the same global scales, other values).
      const std::int64_t rows = t.shape[0], row_bytes = static_cast<std::int64_t>(view.bytes().size()) / rows;
      const std::uint8_t* data = view.bytes().data();
      const auto row = [&](int j, std::int64_t r) { return data + (j % 2 ? rows - 1 - r : r) * row_bytes; };
      std::vector<std::uint8_t> out;
      const bool down = t.name.find(".down_proj.") != std::string::npos;
      if (down) {  // [H, P·I]: the parts side by side in each row
        for (std::int64_t r = 0; r < rows; ++r)
          for (int j = 0; j < parts; ++j) out.insert(out.end(), row(j, r), row(j, r) + row_bytes);
      } else {  // [P·I, H]: the parts one below the other
        for (int j = 0; j < parts; ++j)
          for (std::int64_t r = 0; r < rows; ++r) out.insert(out.end(), row(j, r), row(j, r) + row_bytes);
      }
      const std::vector<std::int64_t> shape = down ? std::vector<std::int64_t>{rows, t.shape[1] * parts}
                                                   : std::vector<std::int64_t>{rows * parts, t.shape[1]};
      writer.add(name, t.dtype, shape, out.data(), out.size());
    }
  });
  return to;
}

std::vector<std::uint16_t> gaussian_bf16(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> x(static_cast<std::size_t>(rows * cols));
  for (auto& v : x) v = static_cast<std::uint16_t>(float_to_bf16(normal(rng)));
  return x;
}

std::vector<float> gaussian_logits(std::int64_t rows, std::int64_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(static_cast<std::size_t>(rows * cols));
  for (auto& v : l) v = normal(rng);
  return l;
}

MoeRun run_moe_logits(MoeLayer& layer, const MoeConfig& config, const std::vector<std::uint16_t>& x,
                      const std::vector<float>& logits, std::int64_t tokens) {
  const Context& ctx = shared_context();
  const auto n = static_cast<std::size_t>(tokens * layer.hidden());
  const bool bf16 = config.output == MoeOutput::bf16;
  const cl::Buffer xb = device_copy(x), lb = device_copy(logits);
  const cl::Buffer out =
      bf16 ? device_copy(std::vector<std::uint16_t>(n, 0x7FC1)) : device_copy(std::vector<float>(n, NAN));
  layer.forward_logits(xb, lb, out, tokens);
  MoeRun r;
  if (bf16) {
    std::vector<std::uint16_t> y(n);
    EXPECT_EQ(ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * 2, y.data()), CL_SUCCESS);
    for (std::uint16_t b : y) {
      r.values.push_back(bf16_to_float(b));
      r.bits.push_back(b);
    }
  } else {
    r.values.resize(n);
    EXPECT_EQ(ctx.queue().enqueueReadBuffer(out, CL_TRUE, 0, n * 4, r.values.data()), CL_SUCCESS);
    for (float v : r.values) {
      std::uint32_t b = 0;
      std::memcpy(&b, &v, 4);
      r.bits.push_back(b);
    }
  }
  return r;
}

std::size_t moe_outside_bound(const reference::MoeReferenceResult& ref, const MoeRun& run, MoeOutput output,
                              const std::string& what) {
  EXPECT_EQ(run.values.size(), ref.value.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < ref.value.size() && i < run.values.size(); ++i) {
    const bool ok = output == MoeOutput::bf16 ? reference::accepts_bf16(ref, i, static_cast<std::uint16_t>(run.bits[i]))
                                              : reference::accepts_fp32(ref, i, run.values[i]);
    if (!ok && ++bad <= 3)
      ADD_FAILURE() << what << ": out[" << i << "] = " << run.values[i] << ", reference " << ref.value[i] << " ± "
                    << ref.bound[i];
  }
  return bad;
}

std::size_t linear_outside_bound(const QuantScheme& scheme, const Fp4Weight& w, const std::vector<std::uint16_t>& x,
                                 std::int64_t m, const std::vector<float>& y, bool bf16_output,
                                 const std::string& what) {
  const std::vector<reference::LinearOutput> ref = reference::LinearReference(scheme, w, x.data(), m).all();
  EXPECT_EQ(y.size(), ref.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < ref.size() && i < y.size(); ++i) {
    const double bound = reference::output_bound(ref[i], w.k, 0.0, bf16_output);
    if (!(std::fabs(static_cast<double>(y[i]) - ref[i].y) <= bound) && ++bad <= 3)
      ADD_FAILURE() << what << ": y[" << i << "] = " << y[i] << ", reference " << ref[i].y << " ± " << bound;
  }
  return bad;
}

std::vector<float> run_linear(Linear& layer, const std::vector<std::uint16_t>& x, std::int64_t m) {
  std::vector<float> y;
  if (layer.options().output == OutputType::fp32) {
    layer.run(x, m, y);
    return y;
  }
  std::vector<std::uint16_t> y16;
  layer.run(x, m, y16);
  for (std::uint16_t b : y16) y.push_back(bf16_to_float(b));
  return y;
}

}  // namespace fp4cl::test
