#include "tuning/tuning_database.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "checkpoint/atomic_file.hpp"
#include "checkpoint/json_access.hpp"
#include "checkpoint/strict_json.hpp"
#include "support/check.hpp"

namespace fp4cl::tuning {

namespace {

using detail::Json;
using detail::JsonPath;

const std::vector<std::string>& shape_keys(const std::string& op) {
  static const std::vector<std::string> linear = {"k", "n"};
  static const std::vector<std::string> moe = {"experts", "hidden", "inter", "topk"};
  return op == "linear" ? linear : moe;
}

bool same_identity(const DeviceIdentity& a, const DeviceIdentity& b) {
  return a.platform == b.platform && a.vendor == b.vendor && a.name == b.name && a.driver == b.driver &&
         a.compute_units == b.compute_units;
}

// The file's names of device kinds.
const char* kind_key(DeviceKind k) {
  switch (k) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::gpu: return "gpu";
    case DeviceKind::accelerator: return "accelerator";
    default: return "other";
  }
}

DeviceKind parse_kind(const std::string& s, const JsonPath& at) {
  for (DeviceKind k : {DeviceKind::cpu, DeviceKind::gpu, DeviceKind::accelerator, DeviceKind::other})
    if (s == kind_key(k)) return k;
  at.fail("must be one of cpu, gpu, accelerator, other, got \"{}\"", s);
}

// Rejects members other than `allowed` (a misspelt key would otherwise be ignored).
void only_keys(const Json& object, std::initializer_list<const char*> allowed, const JsonPath& at) {
  for (const auto& item : object.items()) {
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* k) { return item.key() == k; })) {
      std::string list;
      for (const char* k : allowed) list += (list.empty() ? "" : ", ") + std::string(k);
      (at / item.key()).fail("is not a known key here (expected: {})", list);
    }
  }
}

std::string required_string(const Json& object, const char* key, const JsonPath& at, bool allow_empty = false) {
  const auto v = detail::string_member(object, key, at);
  if (!v) (at / key).fail("is missing");
  if (v->empty() && !allow_empty) (at / key).fail("must not be empty");
  return *v;
}

std::int64_t required_integer(const Json& object, const char* key, const JsonPath& at) {
  const auto v = detail::integer_member(object, key, at);
  if (!v) (at / key).fail("is missing");
  return *v;
}

DeviceIdentity parse_device(const Json& j, const JsonPath& at) {
  detail::expect_object(j, at);
  only_keys(j, {"platform", "vendor", "name", "driver", "compute_units", "kind", "float_width"}, at);
  DeviceIdentity d;
  d.platform = required_string(j, "platform", at);
  d.vendor = required_string(j, "vendor", at, true);
  d.name = required_string(j, "name", at);
  d.driver = required_string(j, "driver", at, true);
  const std::int64_t cu = required_integer(j, "compute_units", at);
  if (cu < 1 || cu > 1'000'000) (at / "compute_units").fail("must be a positive count, got {}", cu);
  d.compute_units = static_cast<unsigned>(cu);
  d.kind = parse_kind(required_string(j, "kind", at), at / "kind");
  if (const auto w = detail::integer_member(j, "float_width", at)) {
    if (*w < 1 || *w > 64) (at / "float_width").fail("must be a vector width from 1 to 64, got {}", *w);
    d.float_width = static_cast<unsigned>(*w);
  }
  return d;
}

Entry parse_entry(const Json& j, const JsonPath& at) {
  detail::expect_object(j, at);
  only_keys(j, {"op", "scheme", "shape", "tokens", "kernel", "params", "measured"}, at);
  Entry e;
  e.op = required_string(j, "op", at);
  if (e.op != "linear" && e.op != "moe") (at / "op").fail("must be \"linear\" or \"moe\", got \"{}\"", e.op);
  e.scheme = required_string(j, "scheme", at);
  QuantScheme scheme;
  if (!parse_scheme_key(e.scheme, scheme))
    (at / "scheme").fail("must be one of nvfp4-w4a16, nvfp4-w4a4, mxfp4-w4a16, mxfp4-w4a4, got \"{}\"", e.scheme);
  const Json* shape = detail::object_member(j, "shape", at);
  if (!shape) (at / "shape").fail("is missing");
  const std::vector<std::string>& keys = shape_keys(e.op);
  for (const auto& item : shape->items()) {
    if (std::find(keys.begin(), keys.end(), item.key()) == keys.end())
      (at / "shape" / item.key()).fail("is not a dimension of a {} layer (expected: {})", e.op, fmt::join(keys, ", "));
  }
  for (const std::string& key : keys) {
    const std::int64_t v = required_integer(*shape, key.c_str(), at / "shape");
    if (v < 1) (at / "shape" / key).fail("must be positive, got {}", v);
    e.shape[key] = v;
  }
  e.tokens = required_integer(j, "tokens", at);
  if (e.tokens < 1 || e.tokens > (std::int64_t{1} << 30))
    (at / "tokens").fail("must be a token count from 1 to 2^30 (the bucket's), got {}", e.tokens);
  e.kernel = required_string(j, "kernel", at);
  if (const Json* params = detail::object_member(j, "params", at)) {
    for (const auto& item : params->items()) {
      if (item.key().empty()) (at / "params").fail("has an empty parameter name");
      const auto v = detail::integer_member(*params, item.key(), at / "params");
      if (!v) (at / "params" / item.key()).fail("must be an integer, got null");
      e.params[item.key()] = *v;
    }
  }
  if (const Json* m = detail::object_member(j, "measured", at)) {
    only_keys(*m, {"us", "gbps", "gflops"}, at / "measured");
    for (const auto& item : m->items()) {
      const JsonPath p = at / "measured" / item.key();
      if (!item.value().is_number()) p.fail("must be a number, got {}", detail::json_text(item.value()));
      const double v = item.value().get<double>();
      if (!std::isfinite(v) || v < 0) p.fail("must be a finite non-negative number, got {}", v);
      (item.key() == "us" ? e.measured.us : item.key() == "gbps" ? e.measured.gbps : e.measured.gflops) = v;
    }
  }
  return e;
}

Json identity_json(const DeviceIdentity& d) {
  Json j = Json::object();
  j["platform"] = d.platform;
  j["vendor"] = d.vendor;
  j["name"] = d.name;
  j["driver"] = d.driver;
  j["compute_units"] = d.compute_units;
  j["kind"] = kind_key(d.kind);
  if (d.float_width > 0) j["float_width"] = d.float_width;
  return j;
}

Json entry_json(const Entry& e) {
  Json j = Json::object();
  j["op"] = e.op;
  j["scheme"] = e.scheme;
  j["shape"] = Json::object();
  for (const auto& [k, v] : e.shape) j["shape"][k] = v;
  j["tokens"] = e.tokens;
  j["kernel"] = e.kernel;
  j["params"] = Json::object();
  for (const auto& [k, v] : e.params) j["params"][k] = v;
  if (e.measured.us > 0 || e.measured.gbps > 0 || e.measured.gflops > 0) {
    // Three significant decimals are plenty for numbers that vary 2x from run to run.
    auto rounded = [](double v) { return std::round(v * 1000.0) / 1000.0; };
    j["measured"] = {{"us", rounded(e.measured.us)}, {"gbps", rounded(e.measured.gbps)},
                     {"gflops", rounded(e.measured.gflops)}};
  }
  return j;
}

}  // namespace

DeviceIdentity DeviceIdentity::of(const DeviceInfo& info) {
  DeviceIdentity d;
  d.platform = info.platform_name;
  d.vendor = info.vendor;
  d.name = info.name;
  d.driver = info.driver_version;
  d.compute_units = info.compute_units;
  d.kind = info.kind;
  d.float_width = info.preferred_float_width;
  return d;
}

std::string DeviceIdentity::describe() const {
  if (float_width > 0)
    return fmt::format("{} ({}, driver {}, {} CUs, float vectors of {})", name, platform, driver, compute_units,
                       float_width);
  return fmt::format("{} ({}, driver {}, {} CUs)", name, platform, driver, compute_units);
}

bool Entry::same_key(const Entry& o) const {
  return op == o.op && scheme == o.scheme && shape == o.shape && tokens == o.tokens;
}

bool Database::empty() const {
  return std::all_of(devices.begin(), devices.end(), [](const DeviceTuning& d) { return d.entries.empty(); });
}

void Database::put(const DeviceIdentity& device, const Entry& entry) {
  auto it = std::find_if(devices.begin(), devices.end(),
                         [&](const DeviceTuning& d) { return same_identity(d.device, device); });
  if (it == devices.end()) it = devices.insert(devices.end(), DeviceTuning{device, {}});
  for (Entry& e : it->entries) {
    if (e.same_key(entry)) {
      e = entry;
      return;
    }
  }
  it->entries.push_back(entry);
}

void Database::remove_device(const DeviceIdentity& device) {
  devices.erase(std::remove_if(devices.begin(), devices.end(),
                               [&](const DeviceTuning& d) { return same_identity(d.device, device); }),
                devices.end());
}

void Database::merge(const Database& newer) {
  for (const DeviceTuning& d : newer.devices)
    for (const Entry& e : d.entries) put(d.device, e);
}

std::string scheme_key(const QuantScheme& s) {
  return fmt::format("{}-{}", s.weight == WeightFormat::nvfp4 ? "nvfp4" : "mxfp4", s.w4a16() ? "w4a16" : "w4a4");
}

bool parse_scheme_key(const std::string& key, QuantScheme& scheme) {
  for (WeightFormat f : {WeightFormat::nvfp4, WeightFormat::mxfp4})
    for (Activations a : {Activations::bf16, Activations::fp4_dynamic}) {
      if (scheme_key({f, a}) == key) {
        scheme = {f, a};
        return true;
      }
    }
  return false;
}

Database parse_database(const std::string& text, const std::string& source) {
  const Json root = parse_strict_json(text, source);
  const JsonPath at(source, "");
  detail::expect_object(root, at);
  only_keys(root, {"schema", "version", "devices"}, at);
  const std::string schema = required_string(root, "schema", at);
  if (schema != kSchemaName) (at / "schema").fail("must be \"{}\", got \"{}\"", kSchemaName, schema);
  const std::int64_t version = required_integer(root, "version", at);
  if (version != kSchemaVersion)
    (at / "version").fail("is {}; this build of fp4cl reads version {}", version, kSchemaVersion);
  const Json* devices = detail::member(root, "devices");
  if (!devices) (at / "devices").fail("is missing");
  if (!devices->is_array()) (at / "devices").fail("must be an array, got {}", devices->type_name());
  Database db;
  for (std::size_t i = 0; i < devices->size(); ++i) {
    const JsonPath dat = (at / "devices")[i];
    const Json& d = (*devices)[i];
    detail::expect_object(d, dat);
    only_keys(d, {"device", "entries"}, dat);
    const Json* device = detail::member(d, "device");
    if (!device) (dat / "device").fail("is missing");
    DeviceTuning tuning{parse_device(*device, dat / "device"), {}};
    for (const DeviceTuning& seen : db.devices)
      if (same_identity(seen.device, tuning.device))
        dat.fail("repeats the device {} (each device appears once)", tuning.device.describe());
    const Json* entries = detail::member(d, "entries");
    if (!entries) (dat / "entries").fail("is missing");
    if (!entries->is_array()) (dat / "entries").fail("must be an array, got {}", entries->type_name());
    for (std::size_t k = 0; k < entries->size(); ++k) {
      Entry e = parse_entry((*entries)[k], (dat / "entries")[k]);
      for (const Entry& seen : tuning.entries)
        if (seen.same_key(e))
          (dat / "entries")[k].fail("repeats the {} {} entry of this shape for {} tokens", e.op, e.scheme, e.tokens);
      tuning.entries.push_back(std::move(e));
    }
    db.devices.push_back(std::move(tuning));
  }
  return db;
}

Database load_database(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the tuning database for reading", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{}: reading the tuning database failed", path);
  return parse_database(text.str(), path);
}

std::string to_json_text(const Database& db) {
  Json root = Json::object();
  root["schema"] = kSchemaName;
  root["version"] = kSchemaVersion;
  root["devices"] = Json::array();
  for (const DeviceTuning& d : db.devices) {
    Json entries = Json::array();
    for (const Entry& e : d.entries) entries.push_back(entry_json(e));
    root["devices"].push_back({{"device", identity_json(d.device)}, {"entries", entries}});
  }
  return root.dump(1) + "\n";
}

void save_database(const std::string& path, const Database& db) {
  const std::string text = to_json_text(db);
  write_file_atomically(path, {{text.data(), text.size()}});
}

}  // namespace fp4cl::tuning
