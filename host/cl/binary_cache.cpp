#include "cl/binary_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "support/hash.hpp"

namespace fp4cl::detail {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "FP4CLBIN1\n";
constexpr std::size_t kChecksumBytes = 16;
constexpr std::uintmax_t kMaxEntryBytes = std::uintmax_t{1} << 30;  // larger = not ours

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool get_u64(std::string_view in, std::size_t& pos, std::uint64_t& v) {
  if (pos > in.size() || in.size() - pos < 8) return false;
  v = 0;
  for (std::size_t i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
  pos += 8;
  return true;
}

std::string checksum(std::string_view key, std::string_view binary) {
  Hash128 h;
  h.update(key).update(binary);
  std::string s;
  put_u64(s, h.a);
  put_u64(s, h.b);
  return s;
}

CacheEntryRead problem(CacheEntryRead::Status status, std::string what) {
  CacheEntryRead r;
  r.status = status;
  r.problem = std::move(what);
  return r;
}

// A name no other thread or process uses at the same time: pid, a per-process counter and
// random bits (the random part keeps names apart across hosts sharing a network cache dir).
fs::path temporary_name(const fs::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fs::path(path.string() + fmt::format(".tmp.{}.{}.{:016x}", static_cast<long>(::getpid()),
                                              counter.fetch_add(1), rng()));
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

std::string program_cache_key(std::string_view source, std::string_view options, const DeviceInfo& device) {
  return fmt::format(
      "fp4cl program cache v1\n"
      "source {} ({} bytes)\noptions {}\n"
      "device {}\nvendor {}\ndevice version {}\ndriver {}\nplatform {}\nplatform version {}\n",
      Hash128().update(source).hex(), source.size(), options, device.name, device.vendor, device.device_version,
      device.driver_version, device.platform_name, device.platform_version);
}

fs::path cache_entry_path(const fs::path& dir, std::string_view key) {
  return dir / (Hash128().update(key).hex() + ".clbin");
}

CacheEntryRead read_cache_entry(const fs::path& path, std::string_view key) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return {};
  if (!fs::is_regular_file(st)) return problem(CacheEntryRead::corrupt, "not a regular file");
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) return problem(CacheEntryRead::corrupt, "its size cannot be read: " + ec.message());
  if (size == 0) return problem(CacheEntryRead::corrupt, "it is empty");
  if (size > kMaxEntryBytes) return problem(CacheEntryRead::corrupt, fmt::format("implausibly large ({} bytes)", size));

  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  if (in) ss << in.rdbuf();
  if (!in || !ss) return problem(CacheEntryRead::corrupt, "it cannot be read");
  const std::string data = ss.str();
  const std::string_view view(data);

  if (view.substr(0, kMagic.size()) != kMagic) return problem(CacheEntryRead::corrupt, "not an fp4cl cache entry");
  std::size_t pos = kMagic.size();
  std::uint64_t key_len = 0, bin_len = 0;
  if (!get_u64(view, pos, key_len) || key_len > view.size() - pos)
    return problem(CacheEntryRead::corrupt, "truncated in its key");
  const std::string_view stored_key = view.substr(pos, key_len);
  pos += key_len;
  if (!get_u64(view, pos, bin_len) || bin_len > view.size() - pos)
    return problem(CacheEntryRead::corrupt, "truncated in its binary");
  const std::string_view binary = view.substr(pos, bin_len);
  pos += bin_len;
  if (view.size() - pos != kChecksumBytes) return problem(CacheEntryRead::corrupt, "its length does not add up");
  if (view.substr(pos) != checksum(stored_key, binary))
    return problem(CacheEntryRead::corrupt, "its checksum does not match");
  if (bin_len == 0) return problem(CacheEntryRead::corrupt, "its binary is empty");
  // Intact, but written for another key (another source, options or driver whose key hashes to
  // the same file name, or an older fp4cl's key format).
  if (stored_key != key) return problem(CacheEntryRead::stale, "it was written for another program or driver");

  CacheEntryRead r;
  r.status = CacheEntryRead::found;
  r.binary = std::string(binary);
  return r;
}

std::string write_cache_entry(const fs::path& path, std::string_view key, std::string_view binary) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return fmt::format("creating the directory {}: {}", path.parent_path().string(), ec.message());

  std::string data(kMagic);
  put_u64(data, key.size());
  data += key;
  put_u64(data, binary.size());
  data += binary;
  data += checksum(key, binary);

  fs::path tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
    tmp = temporary_name(path);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return fmt::format("creating {}: {}", tmp.string(), std::strerror(errno));
  const bool written = write_all(fd, data);
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!written || !closed) {
    fs::remove(tmp, ec);
    return fmt::format("writing {}: {}", tmp.string(), std::strerror(written ? errno : write_errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return fmt::format("renaming {} to {}: {}", tmp.string(), path.string(), why);
  }
  return {};
}

CacheEntryBuildLock::CacheEntryBuildLock(const fs::path& entry, std::chrono::milliseconds max_wait)
    : path_(entry.string() + ".lock") {
  std::error_code ec;
  fs::create_directories(path_.parent_path(), ec);
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return;
  // Polled rather than blocking, so that a holder stuck in its compiler costs at most max_wait.
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      fd_ = fd;
      return;
    }
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= deadline) break;
    waited_ = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(fd);
}

CacheEntryBuildLock::~CacheEntryBuildLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  fs::remove(path_, ec);  // before the unlock: a waiter then holds the removed file's lock
  ::close(fd_);           // releases the lock
}

}  // namespace fp4cl::detail
