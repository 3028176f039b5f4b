// The tuning database: named integer kernel parameters measured best for a device, an operation
// (linear, MoE), a quantization scheme, a layer shape and a token bucket (CLBlast's idea: tuning
// as data keyed by the device, not constants in kernels). `fp4cl-bench tune` writes it; the
// layers read it through tuning_store.hpp.
//
// The file (schema "fp4cl-tuning", version 1):
//   {
//     "schema": "fp4cl-tuning", "version": 1,
//     "devices": [{
//       "device": {"platform": "Portable Computing Language", "vendor": "AuthenticAMD",
//                  "name": "pthread-haswell-AMD EPYC", "driver": "3.1", "compute_units": 2,
//                  "kind": "cpu"},
//       "entries": [{
//         "op": "linear", "scheme": "nvfp4-w4a16", "shape": {"n": 4096, "k": 4096},
//         "tokens": 1, "kernel": "gemv_rows", "params": {"GEMV_TOKENS": 4, "FP4CL_VEC": 16},
//         "measured": {"us": 812.5, "gbps": 11.3, "gflops": 41.2}       (informative)
//       }]
//     }]
//   }
// Shapes: linear {"n", "k"}; MoE {"hidden", "inter", "experts", "topk"}. "tokens" is a power of
// two: the entry serves the token counts nearest to it (tuning_lookup.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fp4cl/device.hpp"
#include "fp4cl/scheme.hpp"

namespace fp4cl::tuning {

// Who a device is: what a database entry is matched against.
struct DeviceIdentity {
  std::string platform, vendor, name, driver;
  unsigned compute_units = 0;
  DeviceKind kind = DeviceKind::other;
  // The preferred fp32 vector width (optional key "float_width"; 0: not recorded). Entries of
  // another CPU model apply only where this is the same and known: a kernel tuned for AVX-512's
  // 16 lanes can be ten times slower on an AVX2 CPU of the same vendor.
  unsigned float_width = 0;

  static DeviceIdentity of(const DeviceInfo& info);
  // "pthread-haswell-AMD EPYC (Portable Computing Language, driver 3.1, 2 CUs, float vectors of 8)"
  std::string describe() const;
};

using Shape = std::map<std::string, std::int64_t>;
using Params = std::map<std::string, long long>;

struct Measurement {
  double us = 0.0, gbps = 0.0, gflops = 0.0;
};

struct Entry {
  std::string op;      // "linear" | "moe"
  std::string scheme;  // scheme_key(): "nvfp4-w4a16", "mxfp4-w4a4", ...
  Shape shape;
  std::int64_t tokens = 1;  // the bucket: the count it was timed at (the tuner's are powers of two)
  std::string kernel;       // the strategy that won at this bucket
  Params params;
  Measurement measured;
  std::string origin;  // the file it was read from (not stored in the file)

  // Entries with the same key describe the same thing (a newer one replaces an older one).
  bool same_key(const Entry& other) const;
};

struct DeviceTuning {
  DeviceIdentity device;
  std::vector<Entry> entries;
};

struct Database {
  std::vector<DeviceTuning> devices;

  bool empty() const;
  // Adds or replaces (same device identity and entry key) every entry of `newer`.
  void merge(const Database& newer);
  // Adds or replaces one entry of `device`.
  void put(const DeviceIdentity& device, const Entry& entry);
  // Drops every entry of `device` (the same identity as put's); other devices' stay.
  void remove_device(const DeviceIdentity& device);
};

// The schemes as the database (and fp4cl-bench --scheme) names them: "nvfp4-w4a16",
// "nvfp4-w4a4", "mxfp4-w4a16", "mxfp4-w4a4". parse_scheme_key returns false for anything else.
std::string scheme_key(const QuantScheme& scheme);
bool parse_scheme_key(const std::string& key, QuantScheme& scheme);

constexpr const char* kSchemaName = "fp4cl-tuning";
constexpr int kSchemaVersion = 1;

// Parses and validates database text. Throws fp4cl::Error "<source>: <json path> <problem>"
// (unknown schema or version, a missing or mistyped field, a bucket outside 1 to 2^30,
// an unknown op or scheme, a duplicate key...).
Database parse_database(const std::string& text, const std::string& source);
// Reads a file (errors name the path).
Database load_database(const std::string& path);
// The JSON text of a database (deterministic: devices and entries in their order, keys sorted).
std::string to_json_text(const Database& db);
// Writes atomically (readers see the old or the new file, never half of one).
void save_database(const std::string& path, const Database& db);

}  // namespace fp4cl::tuning
