// C API linear layers: host arrays and the caller's cl_mem buffers with events give the same bits
// as the C++ API (fp4cl::Linear) for every layout and scheme and lie within the scalar
// reference's bound; options, sizes and buffers are checked with errors naming the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "capi/capi_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/linear.hpp"
#include "support/test_context.hpp"

namespace fp4cl::test {
namespace {

constexpr const char* kQ = "model.layers.0.self_attn.q_proj";

class CapiLinearEveryScheme : public testing::TestWithParam<Variant> {};

TEST_P(CapiLinearEveryScheme, HostRunIsBitIdenticalToTheCppApiAndWithinTheReference) {
  ModelPtr model = open_model(GetParam());
  const Checkpoint ckpt = Checkpoint::open(quantized_model(GetParam()));
  for (const std::int64_t m : {std::int64_t{3}, std::int64_t{40}}) {  // decode and prefill kernels
    for (const int32_t output : {FP4CL_DTYPE_BF16, FP4CL_DTYPE_FP32}) {
      SCOPED_TRACE(testing::Message() << "m = " << m << ", output " << output);
      fp4cl_linear_options o;
      fp4cl_linear_options_init(&o);
      o.max_tokens = 64;
      o.output = output;
      LinearPtr layer = get_linear(model.get(), kQ, &o);
      fp4cl_linear_info info;
      ASSERT_EQ(fp4cl_linear_get_info(layer.get(), &info), FP4CL_SUCCESS);
      EXPECT_EQ(info.n, 64);
      EXPECT_EQ(info.k, 64);
      EXPECT_EQ(info.max_tokens, 64);
      EXPECT_EQ(info.output, output);
      EXPECT_EQ(info.activations, GetParam().scheme.w4a16() ? FP4CL_ACTIVATIONS_BF16 : FP4CL_ACTIVATIONS_FP4);

      const std::vector<std::uint16_t> x = gaussian_bf16(m, 64, 11);
      LinearOptions cpp_options;
      cpp_options.max_tokens = 64;
      cpp_options.output = output == FP4CL_DTYPE_BF16 ? OutputType::bf16 : OutputType::fp32;
      Linear cpp = Linear::from_checkpoint(shared_context(), ckpt, kQ, cpp_options);
      std::vector<float> values;
      if (output == FP4CL_DTYPE_BF16) {
        std::vector<std::uint16_t> y(static_cast<std::size_t>(m * 64)), expected;
        ASSERT_EQ(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2, m, y.data(), y.size() * 2), FP4CL_SUCCESS)
            << fp4cl_last_error();
        cpp.run(x, m, expected);
        EXPECT_EQ(y, expected);
        for (std::uint16_t b : y) values.push_back(bf16_to_float(b));
      } else {
        std::vector<float> y(static_cast<std::size_t>(m * 64)), expected;
        ASSERT_EQ(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2, m, y.data(), y.size() * 4), FP4CL_SUCCESS)
            << fp4cl_last_error();
        cpp.run(x, m, expected);
        EXPECT_EQ(std::memcmp(y.data(), expected.data(), y.size() * 4), 0);
        values = y;
      }
      const LoadedLinear loaded = ckpt.load_linear(kQ);
      EXPECT_EQ(linear_outside_bound(loaded.scheme, loaded.weight, x, m, values, output == FP4CL_DTYPE_BF16,
                                     variant_name(GetParam())),
                0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLayoutAndScheme, CapiLinearEveryScheme, testing::ValuesIn(every_layout_and_scheme()),
                         [](const testing::TestParamInfo<Variant>& p) { return variant_name(p.param); });

// A layer on a context that wraps the test's own cl_context and queue.
struct WrappedLayer {
  ContextPtr ctx;
  ModelPtr model;
  LinearPtr layer;
};
WrappedLayer wrapped_layer() {
  WrappedLayer w;
  fp4cl_context* ctx = nullptr;
  EXPECT_EQ(fp4cl_context_wrap(caller_queue().context, caller_queue().queue, &ctx), FP4CL_SUCCESS);
  w.ctx.reset(ctx);
  fp4cl_model* model = nullptr;
  const std::string dir = quantized_model(default_variant()).string();
  EXPECT_EQ(fp4cl_model_open(ctx, dir.c_str(), &model), FP4CL_SUCCESS) << fp4cl_last_error();
  w.model.reset(model);
  w.layer = get_linear(model, kQ);
  return w;
}

TEST(CapiLinear, EnqueueOnTheCallersQueueWaitsForItsEventsAndGivesTheHostRunsBits) {
  WrappedLayer w = wrapped_layer();
  const CallerQueue& q = caller_queue();
  const std::int64_t m = 5;
  const std::vector<std::uint16_t> x = gaussian_bf16(m, 64, 5);
  std::vector<std::uint16_t> host(static_cast<std::size_t>(m * 64)), device(host.size(), 0x7FC1);
  ASSERT_EQ(fp4cl_linear_run(w.layer.get(), x.data(), x.size() * 2, m, host.data(), host.size() * 2), FP4CL_SUCCESS);

  cl_mem xb = create_buffer(q.context, x.size() * 2), yb = create_buffer(q.context, host.size() * 2);
  cl_event written = nullptr, done = nullptr;
  // The write is enqueued but held back by a user event: the layer must wait for it.
  cl_int err = CL_SUCCESS;
  cl_event gate = clCreateUserEvent(q.context, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  ASSERT_EQ(clEnqueueWriteBuffer(q.queue, xb, CL_FALSE, 0, x.size() * 2, x.data(), 1, &gate, &written), CL_SUCCESS);
  ASSERT_EQ(fp4cl_linear_enqueue(w.layer.get(), xb, yb, m, 1, &written, &done), FP4CL_SUCCESS) << fp4cl_last_error();
  ASSERT_NE(done, nullptr);
  cl_int state = 0;
  ASSERT_EQ(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, nullptr), CL_SUCCESS);
  EXPECT_NE(state, CL_COMPLETE);  // still waiting for the gated write
  ASSERT_EQ(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
  ASSERT_EQ(clEnqueueReadBuffer(q.queue, yb, CL_TRUE, 0, device.size() * 2, device.data(), 1, &done, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(device, host);

  // m = 0: nothing runs, but `done` is a valid event after the wait list.
  cl_event empty = nullptr;
  ASSERT_EQ(fp4cl_linear_enqueue(w.layer.get(), xb, yb, 0, 1, &done, &empty), FP4CL_SUCCESS) << fp4cl_last_error();
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(clWaitForEvents(1, &empty), CL_SUCCESS);
  // done may be NULL: fire and forget, then finish the queue.
  ASSERT_EQ(fp4cl_linear_enqueue(w.layer.get(), xb, yb, m, 0, nullptr, nullptr), FP4CL_SUCCESS);
  ASSERT_EQ(fp4cl_context_finish(w.ctx.get()), FP4CL_SUCCESS);

  for (cl_event e : {gate, written, done, empty}) clReleaseEvent(e);
  clReleaseMemObject(xb);
  clReleaseMemObject(yb);
}

TEST(CapiLinear, EnqueueRefusesBadBuffersAndWaitLists) {
  WrappedLayer w = wrapped_layer();
  const CallerQueue& q = caller_queue();
  cl_context other = nullptr;
  ASSERT_EQ(fp4cl_context_get_cl(c_context(), &other, nullptr, nullptr), FP4CL_SUCCESS);
  cl_mem xb = create_buffer(q.context, 5 * 64 * 2), yb = create_buffer(q.context, 5 * 64 * 2);
  cl_mem foreign = create_buffer(other, 5 * 64 * 2);
  cl_mem small = create_buffer(q.context, 64);
  const fp4cl_status bad = FP4CL_ERROR_INVALID_ARGUMENT;
  fp4cl_linear* l = w.layer.get();
  cl_event done = nullptr;
  expect_error(fp4cl_linear_enqueue(l, nullptr, yb, 5, 0, nullptr, &done), bad, {"the x buffer is NULL"});
  expect_error(fp4cl_linear_enqueue(l, xb, nullptr, 5, 0, nullptr, &done), bad, {"the y buffer is NULL"});
  expect_error(fp4cl_linear_enqueue(l, foreign, yb, 5, 0, nullptr, &done), bad, {"x buffer belongs to another"});
  expect_error(fp4cl_linear_enqueue(l, xb, small, 5, 0, nullptr, &done), bad, {"y buffer has 64 bytes"});
  expect_error(fp4cl_linear_enqueue(l, small, yb, 5, 0, nullptr, &done), bad, {"x buffer has 64 bytes"});
  expect_error(fp4cl_linear_enqueue(l, xb, yb, 5, 2, nullptr, &done), bad, {"num_wait = 2 but wait_list is NULL"});
  cl_event null_event = nullptr;
  expect_error(fp4cl_linear_enqueue(l, xb, yb, 5, 1, &null_event, &done), bad, {"wait_list[0] is NULL"});
  expect_error(fp4cl_linear_enqueue(l, xb, yb, -1, 0, nullptr, &done), bad, {"m = -1"});
  expect_error(fp4cl_linear_enqueue(l, xb, yb, std::int64_t{1} << 31, 0, nullptr, &done), bad,
               {"m = 2147483648 tokens: at most 2^31-1"});
  EXPECT_EQ(done, nullptr);
  for (cl_mem b : {xb, yb, foreign, small}) clReleaseMemObject(b);
}

TEST(CapiLinear, HostRunRefusesWrongSizesNamingTheArray) {
  ModelPtr model = open_model();
  LinearPtr layer = get_linear(model.get(), kQ);
  std::vector<std::uint16_t> x(4 * 64), y(4 * 64);
  const fp4cl_status bad = FP4CL_ERROR_INVALID_ARGUMENT;
  expect_error(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2 - 2, 4, y.data(), y.size() * 2), bad,
               {"x has 510 bytes", "[m, k] = [4, 64] BF16 needs 512"});
  expect_error(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2, 4, y.data(), 100), bad,
               {"y has 100 bytes", "needs 512"});
  expect_error(fp4cl_linear_run(layer.get(), nullptr, 0, 4, y.data(), y.size() * 2), bad, {"x is NULL"});
  expect_error(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2, 4, nullptr, 0), bad, {"y is NULL"});
  expect_error(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2, 600, y.data(), y.size() * 2), bad,
               {"x has 512 bytes", "[m, k] = [600, 64] BF16 needs 76800"});
  EXPECT_EQ(fp4cl_linear_run(layer.get(), nullptr, 0, 0, nullptr, 0), FP4CL_SUCCESS);  // m = 0: nothing to do
  // An fp32 layer needs 4 bytes per output.
  fp4cl_linear_options o;
  fp4cl_linear_options_init(&o);
  o.output = FP4CL_DTYPE_FP32;
  LinearPtr fp32 = get_linear(model.get(), kQ, &o);
  expect_error(fp4cl_linear_run(fp32.get(), x.data(), x.size() * 2, 4, y.data(), y.size() * 2), bad,
               {"y has 512 bytes", "FP32 needs 1024"});
}

// Linear layer kQ of `model` with the default options but max_tokens.
LinearPtr linear_with_max_tokens(fp4cl_model* model, std::int64_t max_tokens) {
  fp4cl_linear_options o;
  fp4cl_linear_options_init(&o);
  o.max_tokens = max_tokens;
  return get_linear(model, kQ, &o);
}

// fp4cl_linear_describe_kernel: the C++ API's description, copied as snprintf copies (the full
// length always; a buffer of size 0 may be NULL; cut to size - 1 bytes); bad arguments named.
TEST(CapiLinear, KernelDescriptionIsTheCppApisAndCopiesLikeSnprintf) {
  ModelPtr model = open_model();
  LinearPtr layer = linear_with_max_tokens(model.get(), 64);
  LinearOptions cpp_options;
  cpp_options.max_tokens = 64;
  const Linear cpp = Linear::from_checkpoint(shared_context(), Checkpoint::open(quantized_model(default_variant())),
                                             kQ, cpp_options);
  for (const std::int64_t m : {std::int64_t{1}, std::int64_t{40}}) {
    const std::string expected = cpp.kernel_description(m);
    ASSERT_FALSE(expected.empty());
    std::size_t length = 0;
    ASSERT_EQ(fp4cl_linear_describe_kernel(layer.get(), m, nullptr, 0, &length), FP4CL_SUCCESS) << fp4cl_last_error();
    EXPECT_EQ(length, expected.size());
    std::vector<char> text(length + 1, 'x');
    ASSERT_EQ(fp4cl_linear_describe_kernel(layer.get(), m, text.data(), text.size(), nullptr), FP4CL_SUCCESS);
    EXPECT_EQ(std::string(text.data()), expected) << "m = " << m;
    char cut[6] = {'x', 'x', 'x', 'x', 'x', 'x'};
    ASSERT_EQ(fp4cl_linear_describe_kernel(layer.get(), m, cut, 5, &length), FP4CL_SUCCESS);
    EXPECT_EQ(std::string(cut), expected.substr(0, 4));
    EXPECT_EQ(cut[5], 'x');  // nothing written past size
    EXPECT_EQ(length, expected.size());
  }
  char text[8];
  expect_error(fp4cl_linear_describe_kernel(layer.get(), 0, text, sizeof text, nullptr), FP4CL_ERROR_INVALID_ARGUMENT,
               {"m = 0: must be 1 to 2^31 - 1"});
  expect_error(fp4cl_linear_describe_kernel(layer.get(), 1, nullptr, 8, nullptr), FP4CL_ERROR_INVALID_ARGUMENT,
               {"buffer is NULL with size 8"});
  expect_error(fp4cl_linear_describe_kernel(nullptr, 1, text, sizeof text, nullptr), FP4CL_ERROR_INVALID_ARGUMENT,
               {"layer is NULL"});
}

// More tokens than max_tokens run in chunks: each chunk's bits are those of a call of that chunk.
TEST(CapiLinear, TokensBeyondMaxTokensRunInChunks) {
  ModelPtr model = open_model();
  LinearPtr layer = linear_with_max_tokens(model.get(), 4);
  const std::int64_t m = 9;
  const std::vector<std::uint16_t> x = gaussian_bf16(m, 64, 17);
  std::vector<std::uint16_t> y(static_cast<std::size_t>(m * 64));
  ASSERT_EQ(fp4cl_linear_run(layer.get(), x.data(), x.size() * 2, m, y.data(), y.size() * 2), FP4CL_SUCCESS)
      << fp4cl_last_error();
  for (std::int64_t first = 0; first < m; first += 4) {
    const std::int64_t rows = std::min<std::int64_t>(4, m - first);
    const std::vector<std::uint16_t> part_x(x.begin() + first * 64, x.begin() + (first + rows) * 64);
    std::vector<std::uint16_t> part(static_cast<std::size_t>(rows * 64));
    ASSERT_EQ(fp4cl_linear_run(layer.get(), part_x.data(), part_x.size() * 2, rows, part.data(), part.size() * 2),
              FP4CL_SUCCESS)
        << fp4cl_last_error();
    EXPECT_EQ(part, std::vector<std::uint16_t>(y.begin() + first * 64, y.begin() + (first + rows) * 64))
        << "chunk at token " << first;
  }
}

TEST(CapiLinear, GettingALayerChecksTheNameKindAndOptions) {
  ModelPtr model = open_model();
  fp4cl_linear* l = nullptr;
  expect_error(fp4cl_model_get_linear(model.get(), "model.layers.0.mlp.experts", nullptr, &l), FP4CL_ERROR_NOT_FOUND,
               {"is an MoE layer, not a linear layer"});
  expect_error(fp4cl_model_get_linear(model.get(), "model.layers.0.self_attn.x_proj", nullptr, &l),
               FP4CL_ERROR_NOT_FOUND, {"no quantized layer named 'model.layers.0.self_attn.x_proj'"});
  expect_error(fp4cl_model_get_linear_at(model.get(), 17, nullptr, &l), FP4CL_ERROR_NOT_FOUND, {"index 17"});
  fp4cl_linear_options o;
  fp4cl_linear_options_init(&o);
  o.max_tokens = 0;
  expect_error(fp4cl_model_get_linear(model.get(), kQ, &o, &l), FP4CL_ERROR_INVALID_ARGUMENT, {"max_tokens = 0"});
  fp4cl_linear_options_init(&o);
  o.output = 7;
  expect_error(fp4cl_model_get_linear(model.get(), kQ, &o, &l), FP4CL_ERROR_INVALID_ARGUMENT, {"output = 7"});
  EXPECT_EQ(l, nullptr);
  // By index: the same layer as by name.
  size_t index = 0;
  ASSERT_EQ(fp4cl_model_find_layer(model.get(), kQ, &index), FP4CL_SUCCESS);
  ASSERT_EQ(fp4cl_model_get_linear_at(model.get(), index, nullptr, &l), FP4CL_SUCCESS) << fp4cl_last_error();
  LinearPtr by_index(l);
  LinearPtr by_name = get_linear(model.get(), kQ);
  const std::vector<std::uint16_t> x = gaussian_bf16(2, 64, 9);
  std::vector<std::uint16_t> a(128), b(128);
  ASSERT_EQ(fp4cl_linear_run(by_index.get(), x.data(), 256, 2, a.data(), 256), FP4CL_SUCCESS);
  ASSERT_EQ(fp4cl_linear_run(by_name.get(), x.data(), 256, 2, b.data(), 256), FP4CL_SUCCESS);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace fp4cl::test
