// The mma strategy's tile keys of a few values (kernels/mma_tile_values.hpp): for every key and
// every value from -1 to 70, the strategy (forced, the value from FP4CL_MOE_TILES) and the tuning
// database (an mma entry holding it) take the same ones, those the table lists (the database none
// of a key it does not tune), and the strategy's refusals say each key's values in their words.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "fp4cl/error.hpp"
#include "kernels/mma_tile_values.hpp"
#include "kernels/moe_registry.hpp"
#include "support/described_devices.hpp"
#include "support/log_capture.hpp"
#include "support/scoped_env.hpp"
#include "support/temp_dir.hpp"
#include "tuning/moe_tuning.hpp"
#include "tuning/tuning_database.hpp"
#include "tuning/tuning_store.hpp"

namespace fp4cl {
namespace {

constexpr int kFirst = -1, kLast = 70;
const QuantScheme kScheme{WeightFormat::nvfp4, Activations::bf16};

// A layer every listed value fits (H = I = 1024: 4 row tiles a warp, 8 blocks of the routed FC1's
// rows); `hidden` gives each database entry a shape of its own.
MoeProblem problem(std::int64_t hidden = 1024) { return {kScheme, hidden, 1024, 64, 4}; }

// Runs `f` with the process's tuning store read from FP4CL_TUNING_FILE = `file`, then reloads it
// from the environment as it was.
void with_tuning_file(const std::string& file, const std::function<void()>& f) {
  {
    const test::ScopedEnv env("FP4CL_TUNING_FILE", file);
    tuning::reload_tuning_store();
    f();
  }
  tuning::reload_tuning_store();
}

// Why the forced mma strategy refuses FP4CL_MOE_TILES "mma.<key>=<value>" ("" when it takes it).
std::string strategy_refusal(const MmaTileKey& key, int value) {
  const test::ScopedEnv tiles("FP4CL_MOE_TILES", fmt::format("mma.{}={}", key.name, value));
  try {
    select_moe_strategies(test::described_h200(), 1, problem(), "mma");
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// Each key's refusal of 3, word for word (tests/moe/test_moe_config.cpp and
// tests/bench/tune_moe_test.cpp match parts of them).
const std::map<std::string, std::string> kRefusalsOf3 = {
    {"tile_m", "tile_m = 3 must be 8, 16, 32 or 64 (MMAs of 8 tokens)"},
    {"unroll", "unroll = 3 must be 1, 2, 4 or 8 (chunks a warp loads ahead)"},
    {"fc2_unroll", "fc2_unroll = 3 must be 0 (unroll's), 1, 2, 4 or 8 (chunks an FC2 warp loads ahead)"},
    {"row_loop", "row_loop = 3 must be 0 (automatic), 1, 2, 4 or 8 (FC1 row blocks a work-group takes)"},
    {"stage", "stage = 3 must be 0 (each warp reads the activations) or 1 (staged in local memory)"},
    {"warp_tiles", "warp_tiles = 3 must be 1, 2 or 4 (row tiles of 16 a warp)"},
    {"routed_warp_tiles",
     "routed_warp_tiles = 3 must be 0 (automatic), 1, 2 or 4 (row tiles of 16 a warp of the routed W4A4 FC1)"},
    {"routed_row_tiles",
     "routed_row_tiles = 3 must be 0 (automatic), 1, 2 or 4 (row tiles of 16 a work-group of the routed FC1)"},
    {"routed_row_loop",
     "routed_row_loop = 3 must be 0 (automatic), 1, 2, 4 or 8 (blocks of rows a work-group of the routed FC1 takes)"},
    {"routed_fc2",
     "routed_fc2 = 3 must be 0 (automatic), 1 (a work-group a tile of pairs) or 2 (a work-group a token)"},
    {"token_fc2_warp_tiles", "token_fc2_warp_tiles = 3 must be 0 (automatic), 1, 2 or 4 (row tiles of 16 a warp of "
                             "the routed chunks' FC2 of a work-group a token)"},
    {"route_logits", "route_logits = 3 must be 0 (automatic: FC1 for one token and small routed chunks), 1 (the "
                     "router kernel) or 2 (FC1 for one token and every routed chunk)"},
};

TEST(MmaTileValues, TheStrategyAndTheTuningDatabaseTakeTheListedValues) {
  const test::ScopedEnv no_kernel("FP4CL_MOE_KERNEL", std::nullopt);
  const test::LogCapture log;  // the database's warnings, the selection's lines
  const DeviceInfo device = test::described_h200();
  std::map<std::pair<std::string, int>, std::string> refusals;
  with_tuning_file("none", [&] {
    for (const MmaTileKey& key : kMmaTileKeys)
      for (int v = kFirst; v <= kLast; ++v) refusals[{key.name, v}] = strategy_refusal(key, v);
  });
  // An mma entry for each key and value, each for a layer of H = 64 · n.
  tuning::Database db;
  std::int64_t n = 0;
  for (const MmaTileKey& key : kMmaTileKeys)
    for (int v = kFirst; v <= kLast; ++v) {
      tuning::Entry e;
      e.op = "moe";
      e.scheme = tuning::scheme_key(kScheme);
      e.shape = {{"hidden", 64 * ++n}, {"inter", 1024}, {"experts", 64}, {"topk", 4}};
      e.tokens = 64;
      e.kernel = "mma";
      e.params = {{key.name, v}};
      db.put(tuning::DeviceIdentity::of(device), e);
    }
  const test::TempDir dir;
  std::map<std::pair<std::string, int>, bool> database_takes;
  with_tuning_file(dir.write("tuning.json", tuning::to_json_text(db)).string(), [&] {
    n = 0;
    for (const MmaTileKey& key : kMmaTileKeys)
      for (int v = kFirst; v <= kLast; ++v) {
        const MoeProblem p = problem(64 * ++n);
        const tuning::MoeTuned tuned =
            tuning::moe_tuned(device, {p.scheme, p.hidden, p.intermediate, p.local_experts, p.top_k});
        database_takes[{key.name, v}] = !tuned.overrides.empty();  // an entry set aside gives nothing
      }
  });
  EXPECT_EQ(std::size(kMmaTileKeys), kRefusalsOf3.size());
  for (const MmaTileKey& key : kMmaTileKeys) {
    for (int v = kFirst; v <= kLast; ++v) {
      SCOPED_TRACE(fmt::format("{} = {}", key.name, v));
      const std::string& why = refusals.at({key.name, v});
      EXPECT_EQ(why.empty(), key.takes(v)) << why;
      EXPECT_EQ(database_takes.at({key.name, v}), key.tuned && why.empty());
      // Past FP4CL_MOE_TILES's own check (non-negative, positive for a key without 0), the
      // refusal names the key's values.
      if (!why.empty() && v >= (key.takes(0) ? 0 : 1)) {
        EXPECT_NE(why.find(fmt::format("{} = {} must be {}", key.name, v, mma_tile_values_text(key))),
                  std::string::npos)
            << why;
      }
    }
    const auto words = kRefusalsOf3.find(key.name);
    ASSERT_NE(words, kRefusalsOf3.end()) << key.name;
    const std::string& why = refusals.at({key.name, 3});
    EXPECT_TRUE(why.size() >= words->second.size() &&
                why.compare(why.size() - words->second.size(), words->second.size(), words->second) == 0)
        << why;
  }
}

}  // namespace
}  // namespace fp4cl
