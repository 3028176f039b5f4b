// libFuzzer target: a safetensors file (8-byte header length, JSON header, data section).
// Properties: the reader accepts the file or throws fp4cl::Error; an accepted file's tensors lie
// inside the file and tile its data section, every accessor works on them, and the writer lays
// them out again as a file the reader accepts with the same tensors, bytes and metadata.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4cl/safetensors.hpp"
#include "fuzz_support.hpp"

namespace {

using fp4cl::fuzz::accepts;
using fp4cl::fuzz::finding;

struct Tensor {
  fp4cl::Dtype dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  bool operator==(const Tensor& o) const { return dtype == o.dtype && shape == o.shape && bytes == o.bytes; }
};

std::map<std::string, Tensor> tensors_of(const fp4cl::SafetensorsFile& file) {
  std::map<std::string, Tensor> out;
  std::uint64_t covered = 0;
  for (const fp4cl::TensorInfo& info : file.tensors()) {
    if (info.begin != covered || info.end < info.begin) finding("tensors do not tile the data section: " + info.name);
    covered = info.end;
    const fp4cl::TensorView view = file.tensor(info.name);
    const fp4cl::Span<const std::uint8_t> bytes = view.bytes();
    if (bytes.size() != info.size_bytes() || info.num_elements() * fp4cl::dtype_bits(info.dtype) !=
                                                   info.size_bytes() * 8)
      finding("size of " + info.name + " disagrees with its shape and dtype");
    std::uint64_t sum = 0;  // touches every byte (ASan checks the view lies inside the file)
    for (std::uint8_t b : bytes) sum += b;
    (void)sum;
    out[info.name] = Tensor{info.dtype, info.shape, std::vector<std::uint8_t>(bytes.begin(), bytes.end())};
    // The typed accessors: they return or throw fp4cl::Error (a dtype or size they cannot give).
    accepts([&] { (void)view.scalar_f32(); });
    accepts([&] { (void)view.to_vector<float>(); });
    accepts([&] { (void)view.to_vector<std::uint16_t>(fp4cl::Dtype::bf16); });
    accepts([&] { (void)view.as<std::uint8_t>(); });
  }
  if (file.data_offset() + covered != file.file_size()) finding("the tensors do not cover the data section");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
  const bool ok = accepts([&] {
    const fp4cl::SafetensorsFile file = fp4cl::SafetensorsFile::from_bytes({data, data + size}, "fuzz.safetensors");
    tensors = tensors_of(file);
    metadata = file.metadata();
  });
  if (!ok) return 0;

  // Written again by fp4cl's writer and read back: the same tensors and metadata.
  fp4cl::SafetensorsWriter writer;
  for (auto& [name, t] : tensors) writer.add(name, t.dtype, t.shape, t.bytes);
  for (const auto& [key, value] : metadata) writer.set_metadata(key, value);
  const fp4cl::SafetensorsFile again = fp4cl::SafetensorsFile::from_bytes(writer.serialize(), "rewritten");
  if (tensors_of(again) != tensors) finding("the rewritten file holds other tensors");
  if (again.metadata() != metadata) finding("the rewritten file holds other metadata");
  return 0;
}
