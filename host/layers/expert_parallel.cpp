// ExpertParallelMoe: one MoeLayer per device, each with its slice of the experts; the fp32
// partial outputs are summed on the host in shard order (include/fp4cl/expert_parallel.hpp).
#include "fp4cl/expert_parallel.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "cl/opencl_calls.hpp"
#include "common/formats.cl"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

// A device buffer that grows to the largest size asked for.
struct GrowingBuffer {
  cl::Buffer buffer;
  std::size_t bytes = 0;

  const cl::Buffer& at_least(const Context& ctx, std::size_t needed, const char* what, int shard) {
    if (needed > bytes || !buffer()) {
      buffer = cl::Buffer();
      bytes = 0;
      buffer = allocate_buffer(ctx, CL_MEM_READ_WRITE, std::max<std::size_t>(needed, 4), nullptr,
                               fmt::format("ExpertParallelMoe: the {} buffer of shard {}", what, shard));
      bytes = std::max<std::size_t>(needed, 4);
    }
    return buffer;
  }
};

struct Shard {
  Shard(Context c, MoeLayer l, std::vector<std::int32_t> m)
      : ctx(std::move(c)), layer(std::move(l)), map(std::move(m)) {}
  Context ctx;
  MoeLayer layer;
  std::vector<std::int32_t> map;
  GrowingBuffer x, ids, weights, logits, out;
  std::vector<float> partial;  // [T, H] fp32, read back
};

template <typename T>
void check_size(const std::vector<T>& v, std::int64_t expected, const char* what, const char* shape) {
  if (static_cast<std::int64_t>(v.size()) != expected)
    fail("ExpertParallelMoe: {} has {} values; {} needs {}", what, v.size(), shape, expected);
}

}  // namespace

struct ExpertParallelMoe::Impl {
  MoeConfig config;  // the whole layer's (output = the summed output's type)
  std::int64_t global_experts = 0, hidden = 0;
  std::vector<Shard> shards;
  std::vector<MoeStats> stats;

  // Enqueues on every shard (inputs written, the layer, the partial output read back), waits for
  // all of them, then sums the partials in shard order into `sum` [T, H].
  MoeStats run(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>* ids,
               const std::vector<float>* weights, const std::vector<float>* logits, std::int64_t tokens,
               std::vector<float>& sum);
  template <typename Out>
  MoeStats forward(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>* ids,
                   const std::vector<float>* weights, const std::vector<float>* logits, std::int64_t tokens,
                   std::vector<Out>& out);
};

ExpertParallelMoe::ExpertParallelMoe(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

ExpertParallelMoe ExpertParallelMoe::create(const std::vector<Context>& devices, const Fp4Experts& experts,
                                            const MoeConfig& config) {
  if (devices.empty()) fail("ExpertParallelMoe: no devices given (one context per shard is needed)");
  return create(devices, experts, config,
                contiguous_expert_maps(experts.num_experts, static_cast<int>(devices.size())));
}

ExpertParallelMoe ExpertParallelMoe::create(const std::vector<Context>& devices, const Fp4Experts& experts,
                                            const MoeConfig& config,
                                            const std::vector<std::vector<std::int32_t>>& expert_maps) {
  if (devices.empty()) fail("ExpertParallelMoe: no devices given (one context per shard is needed)");
  if (!config.expert_map.empty())
    fail(
        "ExpertParallelMoe: MoeConfig::expert_map must be empty (it has {} entries); the partition gives each "
        "shard its map",
        config.expert_map.size());
  if (expert_maps.size() != devices.size())
    fail("ExpertParallelMoe: {} expert maps for {} devices (one map per device)", expert_maps.size(), devices.size());
  check_expert_partition(expert_maps, experts.num_experts);

  auto impl = std::make_shared<Impl>();
  impl->config = config;
  impl->global_experts = experts.num_experts;
  impl->hidden = experts.hidden;
  for (std::size_t s = 0; s < devices.size(); ++s) {
    MoeConfig shard_config = config;
    shard_config.expert_map = expert_maps[s];
    shard_config.output = MoeOutput::fp32;
    Fp4Experts local = slice_experts(experts, expert_maps[s]);
    try {
      MoeLayer layer = MoeLayer::create(devices[s], local, shard_config);
      impl->shards.emplace_back(devices[s], std::move(layer), expert_maps[s]);
    } catch (const Error& e) {
      fail("ExpertParallelMoe: shard {} ({}): {}", s, devices[s].info().name, e.what());
    }
  }
  impl->stats.resize(devices.size());
  log::info("expert-parallel MoE layer: {} global experts over {} shards", experts.num_experts, devices.size());
  return ExpertParallelMoe(std::move(impl));
}

MoeStats ExpertParallelMoe::Impl::run(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>* ids,
                                      const std::vector<float>* weights, const std::vector<float>* logits,
                                      std::int64_t tokens, std::vector<float>& sum) {
  if (tokens < 0) fail("ExpertParallelMoe: tokens = {} is negative", tokens);
  const int k = config.top_k;
  check_size(x, tokens * hidden, "x", "[T, H] BF16");
  if (logits) {
    check_size(*logits, tokens * global_experts, "router_logits", "[T, E_global] fp32");
  } else {
    check_size(*ids, tokens * k, "topk_ids", "[T, k] int32");
    check_size(*weights, tokens * k, "topk_weights", "[T, k] fp32");
  }
  const auto n = static_cast<std::size_t>(tokens * hidden);
  sum.assign(n, 0.0f);
  MoeStats total;
  total.tokens = tokens;
  for (auto& s : stats) s = MoeStats{};
  if (tokens == 0) return total;

  // Enqueue everything on every shard first, so that the shards run at the same time.
  std::vector<MoeCall> calls;
  std::vector<cl::Event> reads;
  std::exception_ptr failure;
  for (std::size_t i = 0; i < shards.size() && !failure; ++i) {
    Shard& s = shards[i];
    const int si = static_cast<int>(i);
    const cl::CommandQueue& q = s.ctx.queue();
    try {
      std::vector<cl::Event> written(1);
      const cl::Buffer& xb = s.x.at_least(s.ctx, x.size() * 2, "x", si);
      check_cl(opencl::enqueue_write(q, xb, false, 0, x.size() * 2, x.data(), nullptr, &written[0]),
               "ExpertParallelMoe: writing x to shard {}", si);
      const cl::Buffer& out = s.out.at_least(s.ctx, n * 4, "partial output", si);
      if (logits) {
        const cl::Buffer& lb = s.logits.at_least(s.ctx, logits->size() * 4, "router_logits", si);
        written.emplace_back();
        check_cl(opencl::enqueue_write(q, lb, false, 0, logits->size() * 4, logits->data(), nullptr, &written.back()),
                 "ExpertParallelMoe: writing router_logits to shard {}", si);
        calls.push_back(s.layer.enqueue_logits(xb, lb, out, tokens, written));
      } else {
        const cl::Buffer& ib = s.ids.at_least(s.ctx, ids->size() * 4, "topk_ids", si);
        const cl::Buffer& wb = s.weights.at_least(s.ctx, weights->size() * 4, "topk_weights", si);
        written.resize(3);
        check_cl(opencl::enqueue_write(q, ib, false, 0, ids->size() * 4, ids->data(), nullptr, &written[1]),
                 "ExpertParallelMoe: writing topk_ids to shard {}", si);
        check_cl(opencl::enqueue_write(q, wb, false, 0, weights->size() * 4, weights->data(), nullptr, &written[2]),
                 "ExpertParallelMoe: writing topk_weights to shard {}", si);
        calls.push_back(s.layer.enqueue_topk(xb, ib, wb, out, tokens, written));
      }
      s.partial.resize(n);
      const std::vector<cl::Event> done{calls.back().done};
      reads.emplace_back();
      check_cl(opencl::enqueue_read(q, out, false, 0, n * 4, s.partial.data(), &done, &reads.back()),
               "ExpertParallelMoe: reading the partial output of shard {}", si);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // Every shard that was given work finishes before anything is reported (the queues read the
  // caller's arrays and write the partials until then).
  for (std::size_t i = 0; i < calls.size(); ++i) {
    try {
      stats[i] = shards[i].layer.finish(calls[i]);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const cl_int err = shards[i].ctx.queue().finish();
    if (err != CL_SUCCESS && !failure) {
      try {
        check_cl(err, "ExpertParallelMoe: waiting for shard {}", i);
      } catch (...) {
        failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);

  // The fixed order: shard 0 first, then each next shard added to the running fp32 sum.
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const float* p = shards[i].partial.data();
    if (i == 0) {
      std::memcpy(sum.data(), p, n * 4);
    } else {
      for (std::size_t j = 0; j < n; ++j) sum[j] += p[j];
    }
    total.local_pairs += stats[i].local_pairs;
    total.expert_passes += stats[i].expert_passes;
    total.weight_bytes += stats[i].weight_bytes;
  }
  return total;
}

template <typename Out>
MoeStats ExpertParallelMoe::Impl::forward(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>* ids,
                                          const std::vector<float>* weights, const std::vector<float>* logits,
                                          std::int64_t tokens, std::vector<Out>& out) {
  constexpr bool bf16 = std::is_same_v<Out, std::uint16_t>;
  if (bf16 != (config.output == MoeOutput::bf16))
    fail("ExpertParallelMoe: the layer's output is {}; pass a std::vector<{}> for it", bf16 ? "fp32" : "BF16",
         bf16 ? "float" : "std::uint16_t");
  if constexpr (bf16) {
    std::vector<float> sum;
    const MoeStats total = run(x, ids, weights, logits, tokens, sum);
    out.resize(sum.size());
    for (std::size_t j = 0; j < sum.size(); ++j) out[j] = static_cast<std::uint16_t>(float_to_bf16(sum[j]));
    return total;
  } else {
    return run(x, ids, weights, logits, tokens, out);
  }
}

MoeStats ExpertParallelMoe::forward_topk(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>& topk_ids,
                                         const std::vector<float>& topk_weights, std::int64_t tokens,
                                         std::vector<std::uint16_t>& out) {
  return impl_->forward(x, &topk_ids, &topk_weights, nullptr, tokens, out);
}

MoeStats ExpertParallelMoe::forward_topk(const std::vector<std::uint16_t>& x, const std::vector<std::int32_t>& topk_ids,
                                         const std::vector<float>& topk_weights, std::int64_t tokens,
                                         std::vector<float>& out) {
  return impl_->forward(x, &topk_ids, &topk_weights, nullptr, tokens, out);
}

MoeStats ExpertParallelMoe::forward_logits(const std::vector<std::uint16_t>& x, const std::vector<float>& router_logits,
                                           std::int64_t tokens, std::vector<std::uint16_t>& out) {
  return impl_->forward(x, nullptr, nullptr, &router_logits, tokens, out);
}

MoeStats ExpertParallelMoe::forward_logits(const std::vector<std::uint16_t>& x, const std::vector<float>& router_logits,
                                           std::int64_t tokens, std::vector<float>& out) {
  return impl_->forward(x, nullptr, nullptr, &router_logits, tokens, out);
}

int ExpertParallelMoe::num_shards() const { return static_cast<int>(impl_->shards.size()); }

MoeLayer& ExpertParallelMoe::shard(int s) {
  if (s < 0 || s >= num_shards()) fail("ExpertParallelMoe::shard({}): the layer has {} shards", s, num_shards());
  return impl_->shards[static_cast<std::size_t>(s)].layer;
}

const std::vector<std::int32_t>& ExpertParallelMoe::expert_map(int s) const {
  if (s < 0 || s >= num_shards()) fail("ExpertParallelMoe::expert_map({}): the layer has {} shards", s, num_shards());
  return impl_->shards[static_cast<std::size_t>(s)].map;
}

const std::vector<MoeStats>& ExpertParallelMoe::shard_stats() const { return impl_->stats; }
std::int64_t ExpertParallelMoe::num_global_experts() const { return impl_->global_experts; }
std::int64_t ExpertParallelMoe::hidden() const { return impl_->hidden; }
int ExpertParallelMoe::top_k() const { return impl_->config.top_k; }
MoeOutput ExpertParallelMoe::output() const { return impl_->config.output; }

}  // namespace fp4cl
