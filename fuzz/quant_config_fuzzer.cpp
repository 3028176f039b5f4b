// libFuzzer target: the quantization config, as JSON text given directly (QuantConfig::from_json)
// and as the files a model directory holds: config.json (QuantConfig::load, ModelConfig::load)
// and hf_quant_config.json alone (QuantConfig::load). Each call returns or throws fp4cl::Error;
// an accepted config answers resolve(), layout() and explain() for typical module names the
// same way through every entry point that accepted it.
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fp4cl/model_config.hpp"
#include "fp4cl/quant_config.hpp"
#include "fuzz_support.hpp"

namespace {

using fp4cl::fuzz::accepts;
using fp4cl::fuzz::finding;

const std::vector<std::string> kModules = {
    "model.layers.0.self_attn.q_proj",     "model.layers.0.self_attn.o_proj",
    "model.layers.0.mlp.gate",             "model.layers.0.mlp.experts.0.gate_proj",
    "model.layers.1.mlp.experts.7.down_proj", "model.layers.10.mlp.down_proj",
    "lm_head",                             "model.layers.0.block_sparse_moe.experts.1.w3",
    "",                                    "model.layers.0.mlp.shared_expert.up_proj",
};

// What a config decides for each module: the scheme's name, "-" unquantized, "!" refused.
std::vector<std::string> decisions(const fp4cl::QuantConfig& config) {
  std::vector<std::string> out;
  for (const std::string& m : kModules) {
    std::string d = "!";
    accepts([&] {
      const std::optional<fp4cl::QuantScheme> s = config.resolve(m);
      d = s ? s->name() : "-";
      if (s) accepts([&] { (void)config.layout(*s); });
    });
    if (config.explain(m).empty()) finding("explain() said nothing for '" + m + "'");
    out.push_back(d);
  }
  (void)config.source();
  (void)fp4cl::to_string(config.producer());
  return out;
}

void write(const std::filesystem::path& file, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) finding("cannot write " + file.string());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fp4cl::fuzz::ScratchDir scratch;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  std::optional<std::vector<std::string>> direct;
  accepts([&] { direct = decisions(fp4cl::QuantConfig::from_json(text, "fuzz.json")); });

  // As a model directory's config.json.
  const std::filesystem::path& dir = scratch.fresh();
  write(dir / "config.json", data, size);
  accepts([&] {
    const fp4cl::ModelConfig model = fp4cl::ModelConfig::load(dir);
    (void)model.renormalize();
    (void)model.softmax_routing();
    if (model.experts_per_token && *model.experts_per_token < 1) finding("num_experts_per_tok < 1 accepted");
  });
  std::optional<std::vector<std::string>> from_config;
  accepts([&] { from_config = decisions(fp4cl::QuantConfig::load(dir)); });

  // As hf_quant_config.json without a config.json.
  std::filesystem::remove(dir / "config.json");
  write(dir / "hf_quant_config.json", data, size);
  std::optional<std::vector<std::string>> from_hf;
  accepts([&] { from_hf = decisions(fp4cl::QuantConfig::load(dir)); });

  // The same text read from a file decides what it decided as a string.
  if (direct && from_config && *direct != *from_config)
    finding("a config decides differently as config.json and as a string");
  if (direct && from_hf && *direct != *from_hf)
    finding("a config decides differently as hf_quant_config.json and as a string");
  return 0;
}
