// Writes the seed corpora of the fuzz targets into OUT/<target>/ from real files: a small
// synthetic MoE model written by the library's writer (what `fp4cl make-model` calls) and
// quantized by quantize_model (what `fp4cl quantize` calls) in every scheme and layout, one of
// them sharded; plus the config files found under the directories given after OUT.
//   make_seeds OUT [CONFIG_DIR...]
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/error.hpp"
#include "fp4cl/model_writer.hpp"
#include "model_dir_archive.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw fp4cl::Error("make_seeds: cannot write " + p.string());
}

// Copies the safetensors and JSON files of a model directory into the targets' corpora.
void add_model(const fs::path& model, const std::string& tag, const fs::path& out) {
  for (const auto& e : fs::directory_iterator(model)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".safetensors") write(out / "safetensors_header" / (tag + "-" + name), read(e.path()));
    if (e.path().extension() == ".json") write(out / "quant_config" / (tag + "-" + name), read(e.path()));
  }
  write(out / "checkpoint_dir" / tag, fp4cl::fuzz::pack_model_dir(model));
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_seeds OUT [CONFIG_DIR...]\n");
    return 2;
  }
  const fs::path out = argv[1];
  fs::remove_all(out);
  for (const char* t : {"safetensors_header", "quant_config", "checkpoint_dir", "moe_routing"})
    fs::create_directories(out / t);
  const fs::path work = out / "models";

  fp4cl::SyntheticModelOptions m;
  m.layers = 1;
  m.hidden = 32;
  m.intermediate = 32;
  m.experts = 2;
  m.experts_per_token = 2;
  m.heads = 1;
  m.kv_heads = 1;
  m.head_dim = 32;
  m.vocab = 8;
  write_synthetic_model(work / "bf16", m);
  add_model(work / "bf16", "bf16", out);

  struct Variant {
    const char* scheme;
    fp4cl::QuantProducer layout;
    std::uint64_t max_shard_bytes;
  };
  const std::uint64_t one = 5'000'000'000ull;
  const Variant variants[] = {
      {"nvfp4", fp4cl::QuantProducer::modelopt, one},
      {"nvfp4a16", fp4cl::QuantProducer::modelopt, one},
      {"nvfp4", fp4cl::QuantProducer::compressed_tensors, one},
      {"nvfp4a16", fp4cl::QuantProducer::compressed_tensors, one},
      {"mxfp4", fp4cl::QuantProducer::compressed_tensors, one},
      {"mxfp4a16", fp4cl::QuantProducer::compressed_tensors, 4096},  // sharded
  };
  for (const Variant& v : variants) {
    fp4cl::QuantizeOptions q;
    q.scheme = fp4cl::quant_scheme_from_name(v.scheme);
    q.layout = v.layout;
    fp4cl::ModelOutputOptions o;
    o.max_shard_bytes = v.max_shard_bytes;
    const std::string tag = std::string(v.scheme) + "-" +
                            (v.layout == fp4cl::QuantProducer::modelopt ? "modelopt" : "ct") +
                            (v.max_shard_bytes == one ? "" : "-sharded");
    quantize_model(work / "bf16", work / tag, q, o);
    add_model(work / tag, tag, out);
  }

  for (int i = 2; i < argc; ++i)
    for (const auto& e : fs::recursive_directory_iterator(argv[i]))
      if (e.path().extension() == ".json")
        write(out / "quant_config" / (e.path().parent_path().filename().string() + "-" + e.path().filename().string()),
              read(e.path()));

  // MoE routing inputs are the target's own byte layout: a few patterned inputs to start from.
  for (std::uint32_t seed = 0; seed < 8; ++seed) {
    std::vector<std::uint8_t> bytes(256);
    std::uint32_t s = seed * 2654435761u + 1;
    for (auto& b : bytes) b = static_cast<std::uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
    bytes[0] = static_cast<std::uint8_t>(seed % 2 ? 0 : 8);  // empty map, or 8 global experts
    write(out / "moe_routing" / ("pattern-" + std::to_string(seed)), bytes);
  }
  // And inputs that route router logits on the mma strategy (moe_routing_fuzzer.cpp's reading
  // order: no map, top-k 2, the tokens, valid ids and weights, host logits, x, the scheme, the
  // host's grouped routing, then the device's logits and layer): one token (FC1 routes it), two
  // (FC1 routes the routed chunk), three (the router kernel), through softmax top-k and the gate.
  for (const auto& [tokens, gate] : {std::pair{1, true}, std::pair{2, true}, std::pair{2, false}, std::pair{3, false}}) {
    std::vector<std::uint8_t> b = {0, 2, static_cast<std::uint8_t>(tokens)};
    const auto add = [&b](std::initializer_list<int> v) {
      for (int x : v) b.push_back(static_cast<std::uint8_t>(x));
    };
    for (int i = 0; i < tokens * 2; ++i) add({0x20, (i + tokens) % 5, 0x20, 0x30 + i});  // id in range, weight on grid
    for (int i = 0; i < tokens * 4; ++i) add({0x20, (7 * i + tokens) % 17});  // host logits on the grid
    for (int i = 0; i < tokens * 32; ++i) add({(13 * i + tokens) % 17});  // x on the grid
    add({0, 1, 0, 1, 1, 0, 0x20, 4});  // W4A16, renormalize; softmax in 1 group, no bias, scaling 0.5
    add({0, 1, gate ? 1 : 0});  // device: not sharded, logits, the gate or softmax top-k
    for (int i = 0; i < tokens * 4; ++i) add({0, (5 * i + 3 * tokens) % 17});  // device logits on the grid
    if (gate) add({0});  // not softmax in groups
    add({2});  // the mma strategy
    write(out / "moe_routing" / ("mma-" + std::string(gate ? "gate-" : "softmax-") + std::to_string(tokens)), b);
  }
  fs::remove_all(work);
  std::printf("make_seeds: corpora written to %s\n", out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "make_seeds: %s\n", e.what());
  return 1;
}
