// Selection among kernel strategies, shared by the layers (linear: FP4CL_LINEAR_KERNEL; MoE:
// FP4CL_MOE_KERNEL). Each strategy says for itself whether it runs on a device and whether it can
// serve a layer, with a reason when not (vLLM's MoE backends do the same); the registry walks the
// strategies in priority order, logs each refusal and returns the first that accepts. A name given
// by the caller or by the environment variable forces one strategy: an unknown name, or one that
// refuses, is an error that says why and lists the valid names.
//
// A Kernel type provides:
//   Verdict is_supported(const Context&) const;          // the device
//   Verdict can_implement(const Config&) const;          // the layer
#pragma once

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fp4cl/context.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

// Yes, or no with the reason.
class Verdict {
 public:
  static Verdict yes() { return Verdict(std::string()); }
  static Verdict no(std::string reason) { return Verdict(reason.empty() ? std::string("refused") : std::move(reason)); }
  explicit operator bool() const { return refusal_.empty(); }
  const std::string& reason() const { return refusal_; }

 private:
  explicit Verdict(std::string refusal) : refusal_(std::move(refusal)) {}
  std::string refusal_;
};

template <typename Kernel, typename Config>
class KernelRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Kernel>()>;
  using Filter = std::function<Verdict(const Kernel&)>;

  struct Refusal {
    std::string kernel, reason;
  };
  struct Selection {
    std::unique_ptr<Kernel> kernel;
    std::string name;
    std::vector<Refusal> refusals;  // the strategies passed over, in priority order
    bool forced = false;
  };

  // `what` names the layer kind in messages ("linear"); `env_var` forces a strategy by name.
  KernelRegistry(std::string what, std::string env_var) : what_(std::move(what)), env_var_(std::move(env_var)) {}

  // Adds a strategy; earlier additions have priority.
  KernelRegistry& add(std::string name, Factory make) {
    for (const auto& e : entries_)
      if (e.name == name) fail("{} kernel registry: '{}' is registered twice", what_, name);
    entries_.push_back({std::move(name), std::move(make)});
    return *this;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) out.push_back(e.name);
    return out;
  }
  const std::string& env_var() const { return env_var_; }

  // The strategy the caller forces: `requested` when not empty, else the environment variable's
  // value, else "" (automatic selection).
  std::string forced_name(const std::string& requested) const {
    if (!requested.empty()) {
      const char* env = std::getenv(env_var_.c_str());
      if (env && *env && requested != env)
        log::info("{} kernel '{}' requested by the caller; {}={} ignored", what_, requested, env_var_, env);
      return requested;
    }
    const char* env = std::getenv(env_var_.c_str());
    return env ? std::string(env) : std::string();
  }

  // A new instance of the named strategy, unchecked (e.g. to ask it static questions).
  std::unique_ptr<Kernel> instantiate(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return e.make();
    fail("unknown {} kernel '{}'; valid names: {}", what_, name, joined_names());
  }

  // The named strategy. Throws fp4cl::Error when the name is unknown (listing the valid names) or
  // when the strategy refuses the device or the layer (with its reason).
  Selection create(const std::string& name, const Context& ctx, const Config& config,
                   const std::string& layer_description) const {
    for (const auto& e : entries_) {
      if (e.name != name) continue;
      Selection s;
      s.kernel = e.make();
      s.name = e.name;
      s.forced = true;
      if (Verdict v = s.kernel->is_supported(ctx); !v)
        fail("{} kernel '{}' was forced ({} or the layer options) but does not run on {}: {}", what_, name,
             env_var_, ctx.info().describe(), v.reason());
      if (Verdict v = s.kernel->can_implement(config); !v)
        fail("{} kernel '{}' was forced ({} or the layer options) but cannot serve {}: {}", what_, name, env_var_,
             layer_description, v.reason());
      log::info("{} kernel '{}' forced for {}", what_, name, layer_description);
      return s;
    }
    fail("unknown {} kernel '{}' (from {} or the layer options); valid names: {}", what_, name, env_var_,
         joined_names());
  }

  // The first strategy, in priority order, that runs on the device, can serve the layer and that
  // `filter` (if any) accepts. Each refusal is logged (info) and recorded. Throws fp4cl::Error with
  // every reason when none accepts.
  Selection select(const Context& ctx, const Config& config, const std::string& layer_description,
                   const Filter& filter = {}) const {
    Selection s;
    for (const auto& e : entries_) {
      std::unique_ptr<Kernel> k = e.make();
      Verdict v = k->is_supported(ctx);
      if (v) v = k->can_implement(config);
      if (v && filter) v = filter(*k);
      if (!v) {
        log::info("{} kernel '{}' passed over for {}: {}", what_, e.name, layer_description, v.reason());
        s.refusals.push_back({e.name, v.reason()});
        continue;
      }
      log::info("{} kernel '{}' selected for {}", what_, e.name, layer_description);
      s.kernel = std::move(k);
      s.name = e.name;
      return s;
    }
    std::string reasons;
    for (const auto& r : s.refusals) reasons += fmt::format("\n  {}: {}", r.kernel, r.reason);
    fail("no {} kernel can serve {} on {}:{}", what_, layer_description, ctx.info().describe(), reasons);
  }

 private:
  std::string joined_names() const {
    std::string s;
    for (const auto& e : entries_) s += (s.empty() ? "" : ", ") + e.name;
    return s.empty() ? std::string("(none registered)") : s;
  }

  struct Entry {
    std::string name;
    Factory make;
  };
  std::string what_, env_var_;
  std::vector<Entry> entries_;
};

}  // namespace fp4cl
