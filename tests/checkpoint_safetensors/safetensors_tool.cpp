// A helper for safetensors_interop.py: reads and writes safetensors files with fp4cl so that the
// script can compare with the official `safetensors` package.
//   safetensors_tool dump <model dir | index | file>       JSON of shards, metadata, tensors (hex bytes)
//   safetensors_tool copy <model> <out file>                rewrite every tensor (and metadata) with fp4cl
//   safetensors_tool copy-sharded <model> <out dir> <max>   the same, as shards of at most <max> bytes
//   safetensors_tool check-many                             one JSON line per file path read from stdin
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "fp4cl/error.hpp"
#include "fp4cl/safetensors.hpp"

namespace {

using fp4cl::SafetensorsFile;
using fp4cl::SafetensorsModel;
using fp4cl::SafetensorsWriter;
using fp4cl::TensorView;
using nlohmann::json;

std::string hex(const TensorView& view) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * view.bytes().size());
  for (std::uint8_t b : view.bytes()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

json describe(const TensorView& view) {
  return {
      {"dtype", std::string(fp4cl::dtype_name(view.dtype()))}, {"shape", view.shape()}, {"hex", hex(view)}};
}

json describe_file(const SafetensorsFile& file) {
  json tensors = json::object();
  for (const fp4cl::TensorInfo& info : file.tensors()) tensors[info.name] = describe(file.tensor(info.name));
  return {{"metadata", file.metadata()}, {"data_offset", file.data_offset()}, {"tensors", tensors}};
}

json dump(const SafetensorsModel& model) {
  json shards = json::array();
  for (const SafetensorsFile& shard : model.shards()) {
    json d = describe_file(shard);
    d["path"] = shard.path();
    d.erase("tensors");
    shards.push_back(d);
  }
  json tensors = json::object();
  for (const std::string& name : model.names()) tensors[name] = describe(model.tensor(name));
  return {{"source", model.source()}, {"shards", shards}, {"tensors", tensors}};
}

SafetensorsWriter writer_for(const SafetensorsModel& model) {
  SafetensorsWriter writer;
  for (const std::string& name : model.names()) writer.add(model.tensor(name));
  for (const SafetensorsFile& shard : model.shards()) {
    for (const auto& [key, value] : shard.metadata()) writer.set_metadata(key, value);
  }
  return writer;
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "dump" && argc == 3) {
    std::cout << dump(SafetensorsModel::open(argv[2])).dump() << "\n";
  } else if (command == "copy" && argc == 4) {
    writer_for(SafetensorsModel::open(argv[2])).write(argv[3]);
  } else if (command == "copy-sharded" && argc == 5) {
    const auto names =
        writer_for(SafetensorsModel::open(argv[2])).write_sharded(argv[3], std::stoull(argv[4]));
    std::cout << json(names).dump() << "\n";
  } else if (command == "check-many" && argc == 2) {
    std::string path;
    while (std::getline(std::cin, path)) {
      json line = {{"path", path}};
      try {
        line.update(describe_file(SafetensorsFile::open(path)));
        line["ok"] = true;
      } catch (const fp4cl::Error& e) {
        line["ok"] = false;
        line["error"] = e.what();
      }
      // Error messages quote file bytes, which need not be UTF-8 when the header is not.
      std::cout << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
  } else {
    std::cerr << "usage: safetensors_tool dump <model> | copy <model> <out> | copy-sharded <model> <dir> "
                 "<max_bytes> | check-many\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const fp4cl::Error& e) {
    std::cerr << "fp4cl::Error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // a bad command-line number, say
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
