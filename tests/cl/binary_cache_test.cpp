// On-disk program binary entries: round trip, every kind of damage detected, stale entries told
// apart, atomic replacement under concurrent readers, the key covering every input, and the
// build lock beside an entry.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cl/binary_cache.hpp"
#include "support/files.hpp"
#include "support/temp_dir.hpp"

namespace fp4cl {
namespace {

namespace fs = std::filesystem;
using detail::CacheEntryRead;

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

DeviceInfo some_device() {
  DeviceInfo d;
  d.name = "pthread-haswell-AMD EPYC";
  d.vendor = "AuthenticAMD";
  d.device_version = "OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-haswell";
  d.driver_version = "3.1";
  d.platform_name = "Portable Computing Language";
  d.platform_version = "OpenCL 3.0 PoCL 3.1 Linux, Release, RELOC, LLVM 15.0.6";
  return d;
}

const std::string kKey = detail::program_cache_key("kernel source", "-DTILE=16", some_device());
const std::string kBinary = std::string("\x7f" "ELF binary bytes\0with a zero", 28);

TEST(BinaryCache, WriteThenReadRoundTripsAndLeavesNoTemporaryFile) {
  test::TempDir dir;
  const fs::path entry = detail::cache_entry_path(dir.path() / "nested" / "dirs", kKey);
  EXPECT_EQ(detail::write_cache_entry(entry, kKey, kBinary), "");
  const CacheEntryRead read = detail::read_cache_entry(entry, kKey);
  EXPECT_EQ(read.status, CacheEntryRead::found) << read.problem;
  EXPECT_EQ(read.binary, kBinary);
  EXPECT_EQ(files_in(entry.parent_path()), std::vector<std::string>{entry.filename().string()});
}

// The build lock: granted at once when free, then its file removed; held elsewhere (another
// process's descriptor), a second lock waits and gives up after its max_wait (the caller then
// builds anyway); an unwritable place gives no lock, not an error.
TEST(BinaryCache, TheBuildLockWaitsForItsHolderAndGivesUp) {
  test::TempDir dir;
  const fs::path entry = dir.path() / "sub" / "e.clbin";
  {
    const detail::CacheEntryBuildLock lock(entry);
    EXPECT_TRUE(lock.held());
    EXPECT_FALSE(lock.waited());
    EXPECT_TRUE(fs::exists(entry.string() + ".lock"));
    // A second lock on the same entry (its own descriptor, as another process's) is not granted
    // while the first is held: it waits, then gives up.
    const detail::CacheEntryBuildLock second(entry, std::chrono::milliseconds(100));
    EXPECT_FALSE(second.held());
    EXPECT_TRUE(second.waited());
  }
  EXPECT_TRUE(files_in(dir.path() / "sub").empty());  // the holder removed its lock file
  // A holder that releases while another waits: the waiter gets the lock.
  const int fd = ::open((entry.string() + ".lock").c_str(), O_RDWR | O_CREAT, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  std::thread release([fd] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::close(fd);
  });
  {
    const detail::CacheEntryBuildLock waiter(entry);
    EXPECT_TRUE(waiter.held());
    EXPECT_TRUE(waiter.waited());
  }
  release.join();
  // No directory to create it in: no lock, no error.
  const fs::path blocked = dir.path() / "file";
  std::ofstream(blocked) << "x";
  const detail::CacheEntryBuildLock none(blocked / "e.clbin", std::chrono::milliseconds(10));
  EXPECT_FALSE(none.held());
}

TEST(BinaryCache, EntryFileNameIsAHashOfTheKey) {
  const fs::path p = detail::cache_entry_path("/cache", kKey);
  EXPECT_EQ(p.parent_path(), fs::path("/cache"));
  EXPECT_EQ(p.extension(), ".clbin");
  EXPECT_EQ(p.stem().string().size(), 32u);
  EXPECT_EQ(p, detail::cache_entry_path("/cache", kKey));
  EXPECT_NE(p, detail::cache_entry_path("/cache", kKey + " "));
}

TEST(BinaryCache, MissingEntryIsMissingNotCorrupt) {
  test::TempDir dir;
  EXPECT_EQ(detail::read_cache_entry(dir.path() / "absent.clbin", kKey).status, CacheEntryRead::missing);
}

TEST(BinaryCache, EveryTruncationIsCorrupt) {
  test::TempDir dir;
  const fs::path entry = dir.path() / "e.clbin";
  ASSERT_EQ(detail::write_cache_entry(entry, kKey, kBinary), "");
  const std::string good = test::file_text(entry);
  for (std::size_t n = 0; n < good.size(); ++n) {
    test::write_file_text(entry, good.substr(0, n));
    const CacheEntryRead read = detail::read_cache_entry(entry, kKey);
    EXPECT_EQ(read.status, CacheEntryRead::corrupt) << "truncated to " << n << " bytes";
    EXPECT_FALSE(read.problem.empty());
  }
}

TEST(BinaryCache, EveryFlippedByteIsCorrupt) {
  test::TempDir dir;
  const fs::path entry = dir.path() / "e.clbin";
  ASSERT_EQ(detail::write_cache_entry(entry, kKey, kBinary), "");
  const std::string good = test::file_text(entry);
  for (std::size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    test::write_file_text(entry, bad);
    EXPECT_EQ(detail::read_cache_entry(entry, kKey).status, CacheEntryRead::corrupt) << "byte " << i << " flipped";
  }
}

TEST(BinaryCache, GarbageAndTrailingBytesAreCorrupt) {
  test::TempDir dir;
  const fs::path entry = dir.path() / "e.clbin";
  std::mt19937 rng(7);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  test::write_file_text(entry, garbage);
  EXPECT_EQ(detail::read_cache_entry(entry, kKey).status, CacheEntryRead::corrupt);
  test::write_file_text(entry, "FP4CLBIN1\n" + garbage);  // right magic, garbage after it
  EXPECT_EQ(detail::read_cache_entry(entry, kKey).status, CacheEntryRead::corrupt);
  ASSERT_EQ(detail::write_cache_entry(entry, kKey, kBinary), "");
  test::write_file_text(entry, test::file_text(entry) + "x");
  const CacheEntryRead read = detail::read_cache_entry(entry, kKey);
  EXPECT_EQ(read.status, CacheEntryRead::corrupt);
  EXPECT_EQ(read.problem, "its length does not add up");
}

TEST(BinaryCache, ADirectoryInPlaceOfTheEntryIsCorrupt) {
  test::TempDir dir;
  fs::create_directory(dir.path() / "e.clbin");
  const CacheEntryRead read = detail::read_cache_entry(dir.path() / "e.clbin", kKey);
  EXPECT_EQ(read.status, CacheEntryRead::corrupt);
  EXPECT_EQ(read.problem, "not a regular file");
}

TEST(BinaryCache, AnIntactEntryOfAnotherKeyIsStale) {
  test::TempDir dir;
  const fs::path entry = dir.path() / "e.clbin";
  const std::string other_key = detail::program_cache_key("kernel source", "-DTILE=8", some_device());
  ASSERT_EQ(detail::write_cache_entry(entry, other_key, kBinary), "");
  const CacheEntryRead read = detail::read_cache_entry(entry, kKey);
  EXPECT_EQ(read.status, CacheEntryRead::stale);
  EXPECT_TRUE(read.binary.empty());
}

TEST(BinaryCache, WriteReplacesAnExistingEntry) {
  test::TempDir dir;
  const fs::path entry = dir.path() / "e.clbin";
  test::write_file_text(entry, "garbage");
  ASSERT_EQ(detail::write_cache_entry(entry, kKey, kBinary), "");
  EXPECT_EQ(detail::read_cache_entry(entry, kKey).binary, kBinary);
}

TEST(BinaryCache, WriteIntoAnImpossibleDirectoryReportsWhy) {
  test::TempDir dir;
  test::write_file_text(dir.path() / "a_file", "not a directory");
  const std::string why = detail::write_cache_entry(dir.path() / "a_file" / "sub" / "e.clbin", kKey, kBinary);
  EXPECT_NE(why.find("creating the directory"), std::string::npos) << why;
}

TEST(BinaryCache, ReadersNeverSeeAPartialEntry) {
  test::TempDir dir;
  const fs::path entry = dir.path() / "e.clbin";
  std::atomic<bool> writing{true};
  std::atomic<int> partial{0}, found{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      // Binaries of different sizes, so a torn file could not pass the length checks by luck.
      const std::string binary(std::size_t{20000} + static_cast<std::size_t>(w) * 7919, static_cast<char>('a' + w));
      for (int i = 0; i < 30; ++i) EXPECT_EQ(detail::write_cache_entry(entry, kKey, binary), "");
    });
  }
  std::thread reader([&] {
    while (writing) {
      const CacheEntryRead read = detail::read_cache_entry(entry, kKey);
      if (read.status == CacheEntryRead::corrupt || read.status == CacheEntryRead::stale) ++partial;
      if (read.status == CacheEntryRead::found) ++found;
    }
  });
  for (auto& t : threads) t.join();
  writing = false;
  reader.join();
  EXPECT_EQ(partial.load(), 0);
  EXPECT_EQ(detail::read_cache_entry(entry, kKey).status, CacheEntryRead::found);
  EXPECT_EQ(files_in(dir.path()), std::vector<std::string>{"e.clbin"});
}

TEST(BinaryCacheKey, CoversEveryInputThatInvalidatesABinary) {
  const DeviceInfo base = some_device();
  const std::string key = detail::program_cache_key("src", "-DA=1", base);
  EXPECT_EQ(key, detail::program_cache_key("src", "-DA=1", base));
  EXPECT_NE(key, detail::program_cache_key("src ", "-DA=1", base));
  EXPECT_NE(key, detail::program_cache_key("src", "-DA=2", base));
  EXPECT_NE(key, detail::program_cache_key("src", "", base));
  auto changed = [&](auto&& edit) {
    DeviceInfo d = base;
    edit(d);
    return detail::program_cache_key("src", "-DA=1", d);
  };
  EXPECT_NE(key, changed([](DeviceInfo& d) { d.name += "X"; }));
  EXPECT_NE(key, changed([](DeviceInfo& d) { d.driver_version = "3.2"; }));
  EXPECT_NE(key, changed([](DeviceInfo& d) { d.platform_version += " patched"; }));
  EXPECT_NE(key, changed([](DeviceInfo& d) { d.platform_name = "Other"; }));
  EXPECT_NE(key, changed([](DeviceInfo& d) { d.device_version += "!"; }));
  // Indices and capabilities do not change the binary.
  EXPECT_EQ(key, changed([](DeviceInfo& d) { d.platform_index = 3; d.compute_units = 99; }));
}

}  // namespace
}  // namespace fp4cl
