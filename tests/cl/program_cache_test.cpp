// The program cache: in memory per cache, on disk across caches (and processes), built once when
// several miss the same entry at once; corrupt, stale and driver-refused entries are rebuilt with
// a warning; an unwritable directory or "off" only loses the disk cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cl/binary_cache.hpp"
#include "fp4cl/error.hpp"
#include "fp4cl/program_cache.hpp"
#include "int_kernel.hpp"
#include "memory_sources.hpp"
#include "support/log.hpp"
#include "support/log_capture.hpp"
#include "support/scoped_env.hpp"
#include "support/stderr_capture.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

namespace fp4cl {
namespace {

namespace fs = std::filesystem;

// Tests share two option sets (OFFSET 1 and 2) so that PoCL's own cache spares cold compiles.
const char* kScaleSource = R"(
__kernel void scale(__global int* out) {
  out[get_global_id(0)] = FACTOR * (int)get_global_id(0) + OFFSET;
}
)";
const char* kOtherSource = "__kernel void other(__global int* out) { out[0] = 42; }\n";

KernelSources sources(const char* scale = kScaleSource) {
  return test::memory_sources({{"scale.cl", scale}, {"other.cl", kOtherSource}});
}

std::unique_ptr<ProgramCache> make_cache(const std::string& disk_dir, KernelSources table = sources(),
                                         DeviceInfo info = test::shared_context().info()) {
  const Context& ctx = test::shared_context();
  return std::make_unique<ProgramCache>(ctx.opencl_context(), ctx.device(), std::move(info), disk_dir,
                                        std::move(table));
}

BuildOptions offset(int value) { return BuildOptions().define("OFFSET", value).define("FACTOR", 10); }

// scale with OFFSET=k writes k, 10 + k, 20 + k.
std::vector<cl_int> run_scale(ProgramCache& cache, int offset_value) {
  return test::run_int_kernel(test::shared_context(), cache.kernel("scale.cl", "scale", offset(offset_value)), 3);
}
std::vector<cl_int> expected_scale(int k) { return {k, 10 + k, 20 + k}; }

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> found;
  if (!fs::exists(dir)) return found;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) found.push_back(e.path());
  return found;
}


// The only entry in `dir` (after building one program there).
fs::path only_entry(const fs::path& dir) {
  const auto found = entries(dir);
  EXPECT_EQ(found.size(), 1u);
  return found.empty() ? fs::path() : found.front();
}

// PoCL's compiler writes "1 warning generated." to stderr for a program with a warning: fp4cl
// builds there with -w, so a layer's programs print nothing, unless the log shows debug messages,
// where the build log carries the warning. (A fresh define each run: PoCL's own cache would skip
// the compiler.)
TEST(ProgramCache, PoclBuildsWriteNoWarningsToStderr) {
  if (!test::shared_context().info().is_pocl()) GTEST_SKIP() << "PoCL's compiler writes to stderr";
  const auto table = test::memory_sources(
      {{"warned.cl", "#warning \"fp4cl's probe of the compiler's warnings\"\n"
                     "__kernel void warned(__global int* out) { out[get_global_id(0)] = PROBE; }\n"}});
  const auto probe = static_cast<long long>(std::random_device{}() % 1000000007u);
  {
    const log::Level before = log::level();
    log::set_level(log::Level::info);
    auto cache = make_cache("", table);
    std::string err;
    try {
      err = test::stderr_of([&] { cache->program("warned.cl", BuildOptions().define("PROBE", probe)); });
    } catch (...) {
      log::set_level(before);
      throw;
    }
    log::set_level(before);
    EXPECT_EQ(err, "") << "the build wrote to stderr";
  }
  test::LogCapture capture;  // at debug level
  auto cache = make_cache("", table);
  cache->program("warned.cl", BuildOptions().define("PROBE", probe + 1));
  bool logged = false;
  for (const auto& m : capture.at(log::Level::debug))
    logged = logged || (m.find("build log of warned.cl") != std::string::npos &&
                        m.find("probe of the compiler") != std::string::npos);
  EXPECT_TRUE(logged) << "the debug log should carry the build log's warning";
}

TEST(ProgramCache, MemoryHitReturnsTheSameProgram) {
  auto cache = make_cache("");
  const cl::Program a = cache->program("scale.cl", offset(1));
  const cl::Program b = cache->program("scale.cl", offset(1));
  EXPECT_EQ(a(), b());
  // Equal options given in another order are the same program.
  const cl::Program c = cache->program("scale.cl", BuildOptions().define("FACTOR", 10).define("OFFSET", 2));
  const cl::Program d = cache->program("scale.cl", offset(2));
  EXPECT_EQ(c(), d());
  EXPECT_NE(a(), c());
  const ProgramCacheStats s = cache->stats();
  EXPECT_EQ(s.source_builds, 2u);
  EXPECT_EQ(s.memory_hits, 2u);
  EXPECT_EQ(s.disk_hits, 0u);
}

TEST(ProgramCache, DiskMissThenDiskHitInAFreshCache) {
  test::TempDir dir;
  {
    auto first = make_cache(dir.str());
    EXPECT_EQ(run_scale(*first, 1), expected_scale(1));
    const ProgramCacheStats s = first->stats();
    EXPECT_EQ(s.source_builds, 1u);
    EXPECT_EQ(s.disk_hits, 0u);
    EXPECT_EQ(s.disk_write_failures, 0u);
  }
  const fs::path entry = only_entry(dir.path());  // and no temporary file left behind
  EXPECT_EQ(entry.extension(), ".clbin");
  auto second = make_cache(dir.str());
  EXPECT_EQ(run_scale(*second, 1), expected_scale(1));  // the binary from disk computes the same
  const ProgramCacheStats s = second->stats();
  EXPECT_EQ(s.disk_hits, 1u);
  EXPECT_EQ(s.source_builds, 0u);
  EXPECT_EQ(s.disk_rejected, 0u);
}

TEST(ProgramCache, CorruptEntriesAreRebuiltWithAWarning) {
  test::TempDir dir;
  { EXPECT_EQ(run_scale(*make_cache(dir.str()), 1), expected_scale(1)); }
  const fs::path entry = only_entry(dir.path());
  const std::string good = test::file_text(entry);
  ASSERT_GT(good.size(), 64u);

  std::string flipped = good;
  for (std::size_t i = good.size() / 2; i < good.size() / 2 + 8; ++i) flipped[i] = static_cast<char>(~flipped[i]);
  const std::vector<std::pair<const char*, std::string>> damages = {
      {"truncated", good.substr(0, good.size() / 2)},
      {"bytes flipped", flipped},
      {"garbage", std::string(good.size(), '\x5a')},
      {"empty", ""},
  };
  for (const auto& [what, damaged] : damages) {
    SCOPED_TRACE(what);
    test::write_file_text(entry, damaged);
    test::LogCapture log;
    auto cache = make_cache(dir.str());
    EXPECT_EQ(run_scale(*cache, 1), expected_scale(1));
    const ProgramCacheStats s = cache->stats();
    EXPECT_EQ(s.disk_rejected, 1u);
    EXPECT_EQ(s.disk_hits, 0u);
    EXPECT_EQ(s.source_builds, 1u);
    const auto warnings = log.warnings();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find(entry.string()), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("is corrupt"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("rebuilding it"), std::string::npos) << warnings[0];
    // The rebuild rewrote the entry: the next cache loads it.
    auto next = make_cache(dir.str());
    next->program("scale.cl", offset(1));
    EXPECT_EQ(next->stats().disk_hits, 1u);
  }
}

TEST(ProgramCache, StaleEntryIsRebuiltNotUsed) {
  test::TempDir dir;
  fs::path entry1, entry2;
  {
    auto cache = make_cache(dir.str());
    cache->program("scale.cl", offset(1));
    entry1 = only_entry(dir.path());
    cache->program("scale.cl", offset(2));
  }
  for (const auto& e : entries(dir.path()))
    if (e != entry1) entry2 = e;
  ASSERT_FALSE(entry2.empty());
  // The binary of OFFSET=2 under the file name of OFFSET=1: intact, but for another key.
  fs::copy_file(entry2, entry1, fs::copy_options::overwrite_existing);
  test::LogCapture log;
  auto cache = make_cache(dir.str());
  EXPECT_EQ(run_scale(*cache, 1), expected_scale(1));  // not the OFFSET=2 binary's results
  const ProgramCacheStats s = cache->stats();
  EXPECT_EQ(s.disk_rejected, 1u);
  EXPECT_EQ(s.source_builds, 1u);
  ASSERT_EQ(log.warnings().size(), 1u);
  EXPECT_NE(log.warnings()[0].find("is stale"), std::string::npos) << log.warnings()[0];
  EXPECT_EQ(detail::read_cache_entry(entry1, detail::program_cache_key(kernel_source("scale.cl", sources()),
                                                                      offset(1).str(), test::shared_context().info()))
                .status,
            detail::CacheEntryRead::found);
}

TEST(ProgramCache, ABinaryTheDriverRefusesIsRebuilt) {
  test::TempDir dir;
  const DeviceInfo& info = test::shared_context().info();
  const std::string key = detail::program_cache_key(kernel_source("scale.cl", sources()), offset(1).str(), info);
  const fs::path entry = detail::cache_entry_path(dir.path(), key);
  // A well-formed entry for the right key whose binary is no program at all.
  ASSERT_EQ(detail::write_cache_entry(entry, key, "this is not a device binary"), "");
  test::LogCapture log;
  auto cache = make_cache(dir.str());
  EXPECT_EQ(run_scale(*cache, 1), expected_scale(1));
  const ProgramCacheStats s = cache->stats();
  EXPECT_EQ(s.disk_rejected, 1u);
  EXPECT_EQ(s.source_builds, 1u);
  ASSERT_EQ(log.warnings().size(), 1u);
  EXPECT_NE(log.warnings()[0].find("refused cached binary"), std::string::npos) << log.warnings()[0];
  EXPECT_EQ(detail::read_cache_entry(entry, key).status, detail::CacheEntryRead::found);
  EXPECT_NE(detail::read_cache_entry(entry, key).binary, "this is not a device binary");
}

TEST(ProgramCache, SourceOptionsAndDriverEachGetTheirOwnEntry) {
  test::TempDir dir;
  auto cache = make_cache(dir.str());
  cache->program("scale.cl", offset(1));
  cache->program("scale.cl", offset(2));
  cache->program("other.cl");
  EXPECT_EQ(entries(dir.path()).size(), 3u);
  EXPECT_EQ(cache->stats().source_builds, 3u);

  // The same file name with another text: a disk miss, not the old binary.
  auto edited = make_cache(dir.str(), sources("__kernel void scale(__global int* out) {\n"
                                              "  out[get_global_id(0)] = -OFFSET * FACTOR;\n}\n"));
  EXPECT_EQ(test::run_int_kernel(test::shared_context(), edited->kernel("scale.cl", "scale", offset(1)), 2),
            (std::vector<cl_int>{-10, -10}));
  EXPECT_EQ(edited->stats().disk_hits, 0u);
  EXPECT_EQ(entries(dir.path()).size(), 4u);

  // Another driver version: a disk miss.
  DeviceInfo updated = test::shared_context().info();
  updated.driver_version += "-updated";
  auto after_update = make_cache(dir.str(), sources(), updated);
  after_update->program("scale.cl", offset(1));
  EXPECT_EQ(after_update->stats().disk_hits, 0u);
  EXPECT_EQ(after_update->stats().source_builds, 1u);
  EXPECT_EQ(entries(dir.path()).size(), 5u);
}

TEST(ProgramCache, AnUnwritableDirectoryOnlyLosesTheDiskCache) {
  test::TempDir dir;
  test::write_file_text(dir.path() / "a_file", "a file where the cache directory's parent should be");
  const std::string impossible = (dir.path() / "a_file" / "cache").string();
  test::LogCapture log;
  auto cache = make_cache(impossible);
  EXPECT_EQ(run_scale(*cache, 1), expected_scale(1));
  cache->program("other.cl");
  const ProgramCacheStats s = cache->stats();
  EXPECT_EQ(s.source_builds, 2u);
  EXPECT_EQ(s.disk_write_failures, 2u);
  EXPECT_EQ(s.disk_rejected, 0u);
  const auto warnings = log.warnings();  // one warning, not one per program
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("could not write program cache entry"), std::string::npos) << warnings[0];
}

TEST(ProgramCache, OffDisablesTheDiskCache) {
  {
    // "off" wins over the default locations, in any case.
    test::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    test::ScopedEnv home("HOME", "/home/someone");
    for (const char* off : {"off", "OFF", "Off"}) {
      test::ScopedEnv env("FP4CL_CACHE_DIR", off);
      EXPECT_EQ(ProgramCache::disk_dir_from_env(), "");
    }
  }
  test::ScopedEnv env("FP4CL_CACHE_DIR", "off");
  EXPECT_EQ(Context::create().programs().disk_dir(), "");
  // Without a disk cache nothing carries over: a fresh cache compiles again.
  for (int i = 0; i < 2; ++i) {
    auto cache = make_cache(ProgramCache::disk_dir_from_env());
    cache->program("scale.cl", offset(1));
    EXPECT_EQ(cache->stats().source_builds, 1u);
    EXPECT_EQ(cache->stats().disk_hits, 0u);
    EXPECT_EQ(cache->stats().disk_write_failures, 0u);
  }
}

TEST(ProgramCache, DiskDirFromEnvironment) {
  test::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
  test::ScopedEnv home("HOME", "/home/someone");
  {
    test::ScopedEnv env("FP4CL_CACHE_DIR", "/somewhere/cache");
    EXPECT_EQ(ProgramCache::disk_dir_from_env(), "/somewhere/cache");
  }
  test::ScopedEnv unset("FP4CL_CACHE_DIR", std::nullopt);
  EXPECT_EQ(ProgramCache::disk_dir_from_env(), "/xdg/fp4cl");
  {
    test::ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(ProgramCache::disk_dir_from_env(), "/home/someone/.cache/fp4cl");
    test::ScopedEnv no_home("HOME", std::nullopt);
    EXPECT_EQ(ProgramCache::disk_dir_from_env(), "");
  }
}

// A Context's disk cache: with FP4CL_CACHE_DIR unset, none on PoCL while PoCL's own kernel cache
// is on (POCL_KERNEL_CACHE unset or not 0), the default location elsewhere; a directory or "off"
// that FP4CL_CACHE_DIR names holds on every device.
TEST(ProgramCache, PoclKeepsItsOwnCacheUnlessADirectoryIsNamed) {
  test::ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
  test::ScopedEnv unset("FP4CL_CACHE_DIR", std::nullopt);
  test::ScopedEnv pocl_default("POCL_KERNEL_CACHE", std::nullopt);
  DeviceInfo pocl, nvidia;
  pocl.platform_name = "Portable Computing Language";
  nvidia.platform_name = "NVIDIA CUDA";
  EXPECT_TRUE(pocl.is_pocl());
  EXPECT_FALSE(nvidia.is_pocl());
  EXPECT_EQ(ProgramCache::disk_dir_for(pocl), "");
  EXPECT_EQ(ProgramCache::disk_dir_for(nvidia), "/xdg/fp4cl");
  {
    test::ScopedEnv pocl_on("POCL_KERNEL_CACHE", "1");
    EXPECT_EQ(ProgramCache::disk_dir_for(pocl), "");
  }
  {
    test::ScopedEnv pocl_off("POCL_KERNEL_CACHE", "0");
    EXPECT_EQ(ProgramCache::disk_dir_for(pocl), "/xdg/fp4cl");
  }
  {
    test::ScopedEnv named("FP4CL_CACHE_DIR", "/somewhere/cache");
    EXPECT_EQ(ProgramCache::disk_dir_for(pocl), "/somewhere/cache");
    EXPECT_EQ(ProgramCache::disk_dir_for(nvidia), "/somewhere/cache");
  }
  {
    test::ScopedEnv off("FP4CL_CACHE_DIR", "off");
    EXPECT_EQ(ProgramCache::disk_dir_for(nvidia), "");
  }
  // The Context the library creates on this machine's device follows the same rule.
  const DeviceInfo& here = test::shared_context().info();
  EXPECT_EQ(Context::create().programs().disk_dir(), here.is_pocl() ? "" : "/xdg/fp4cl");
  test::ScopedEnv named("FP4CL_CACHE_DIR", "/somewhere/cache");
  EXPECT_EQ(Context::create().programs().disk_dir(), "/somewhere/cache");
}

// FP4CL_BUILD_FLAGS: its flags reach every build (the driver reports them among the program's
// build options), from source and from a cached binary, and give programs their own cache entries;
// defines, include paths, flags that relax the arithmetic and non-flags are refused naming the
// variable; unset or blank, nothing is added.
TEST(ProgramCache, BuildFlagsFromTheEnvironmentReachEveryBuild) {
  const auto built_with = [](const cl::Program& p) {
    return p.getBuildInfo<CL_PROGRAM_BUILD_OPTIONS>(test::shared_context().device());
  };
  test::TempDir dir;
  {
    test::ScopedEnv unset("FP4CL_BUILD_FLAGS", std::nullopt);
    EXPECT_TRUE(ProgramCache::build_flags_from_env().empty());
    EXPECT_EQ(run_scale(*make_cache(dir.str()), 1), expected_scale(1));
  }
  {
    test::ScopedEnv blank("FP4CL_BUILD_FLAGS", " \t ");
    EXPECT_TRUE(ProgramCache::build_flags_from_env().empty());
  }
  {
    // A word that is not a flag is the argument of the flag before it (NVIDIA's
    // -cl-nv-maxrregcount <N>): one entry, written as two words.
    test::ScopedEnv with_argument("FP4CL_BUILD_FLAGS", "-cl-nv-maxrregcount 64 -w");
    EXPECT_EQ(ProgramCache::build_flags_from_env(), (std::vector<std::string>{"-cl-nv-maxrregcount 64", "-w"}));
  }
  test::ScopedEnv env("FP4CL_BUILD_FLAGS", " -w  -cl-opt-disable ");
  EXPECT_EQ(ProgramCache::build_flags_from_env(), (std::vector<std::string>{"-w", "-cl-opt-disable"}));
  {
    auto cache = make_cache(dir.str());
    EXPECT_EQ(run_scale(*cache, 1), expected_scale(1));
    const std::string options = built_with(cache->program("scale.cl", offset(1)));
    EXPECT_NE(options.find("-w"), std::string::npos) << options;
    EXPECT_NE(options.find("-cl-opt-disable"), std::string::npos) << options;
    EXPECT_EQ(cache->stats().source_builds, 1u);  // not the entry built without the flags
  }
  EXPECT_EQ(entries(dir.path()).size(), 2u);
  auto again = make_cache(dir.str());  // the binary with the flags, from disk
  EXPECT_EQ(run_scale(*again, 1), expected_scale(1));
  EXPECT_EQ(again->stats().disk_hits, 1u);
  EXPECT_NE(built_with(again->program("scale.cl", offset(1))).find("-cl-opt-disable"), std::string::npos);

  const auto refused = [](const std::string& value, const std::string& fragment) {
    test::ScopedEnv bad("FP4CL_BUILD_FLAGS", value);
    try {
      ProgramCache::build_flags_from_env();
      ADD_FAILURE() << value << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("FP4CL_BUILD_FLAGS"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_THROW(make_cache(""), Error) << value;  // a cache is not created with them
  };
  refused("-w -DFACTOR=3", "-DFACTOR=3 is a define");
  refused("-I/tmp", "-I/tmp is an include path");
  refused("-cl-fast-relaxed-math", "-cl-fast-relaxed-math relaxes the floating-point arithmetic");
  refused("-cl-mad-enable", "-cl-mad-enable relaxes");
  refused("verbose", "'verbose' is not a compiler flag");
  refused("-cl-nv-maxrregcount 6'4", "'6'4' is not an argument of -cl-nv-maxrregcount");
  refused("-cl-nv-maxrregcount 64 32", "'32' is not a compiler flag");
}

// Caches sharing a directory (as processes do) that miss the same entry at once build it once:
// the other takes the entry's build lock after the builder and loads its binary. No lock file is
// left behind.
TEST(ProgramCache, CachesSharingADirectoryBuildAnEntryOnce) {
  test::TempDir dir;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    fs::remove_all(dir.path() / "c");
    const std::string where = (dir.path() / "c").string();
    constexpr int kCaches = 4;
    std::vector<std::unique_ptr<ProgramCache>> caches;
    for (int c = 0; c < kCaches; ++c) caches.push_back(make_cache(where));
    std::vector<std::thread> threads;
    for (int c = 0; c < kCaches; ++c)
      threads.emplace_back([&, c] { caches[static_cast<std::size_t>(c)]->program("scale.cl", offset(1 + round % 2)); });
    for (auto& t : threads) t.join();
    std::uint64_t builds = 0, hits = 0;
    for (const auto& cache : caches) {
      const ProgramCacheStats s = cache->stats();
      builds += s.source_builds;
      hits += s.disk_hits;
      EXPECT_EQ(s.disk_rejected, 0u);
    }
    EXPECT_EQ(builds, 1u);
    EXPECT_EQ(hits, static_cast<std::uint64_t>(kCaches - 1));
    EXPECT_EQ(only_entry(where).extension(), ".clbin");
    for (const auto& cache : caches) EXPECT_EQ(run_scale(*cache, 1 + round % 2), expected_scale(1 + round % 2));
  }
}

TEST(ProgramCache, ConcurrentRequestsBuildOnce) {
  auto cache = make_cache("");
  constexpr int kThreads = 8;
  std::vector<cl::Program> programs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { programs[static_cast<std::size_t>(t)] = cache->program("scale.cl", offset(1)); });
  for (auto& t : threads) t.join();
  for (const auto& p : programs) EXPECT_EQ(p(), programs[0]());
  const ProgramCacheStats s = cache->stats();
  EXPECT_EQ(s.source_builds, 1u);
  EXPECT_EQ(s.memory_hits, static_cast<std::uint64_t>(kThreads - 1));
}

}  // namespace
}  // namespace fp4cl
