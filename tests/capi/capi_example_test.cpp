// examples/run_layers.c, the C example program, run on a quantized checkpoint: it must succeed,
// report bit-identical host and cl_mem paths, and its outputs must be the C++ API's bits for the
// same inputs and lie within the scalar reference's bound.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "capi/capi_support.hpp"
#include "fp4cl/checkpoint.hpp"
#include "fp4cl/formats.hpp"
#include "fp4cl/linear.hpp"
#include "fp4cl/moe.hpp"
#include "reference/moe_reference.hpp"
#include "support/temp_dir.hpp"
#include "support/test_context.hpp"

#ifndef FP4CL_EXAMPLE_RUN_LAYERS
#error "the build defines FP4CL_EXAMPLE_RUN_LAYERS (the example program's path)"
#endif

namespace fp4cl::test {
namespace {

template <typename T>
std::vector<T> read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f) << p;
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

std::string run_command(const std::string& command, int& status) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) {
    status = -1;
    return out;
  }
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  status = ::pclose(p);
  return out;
}

TEST(CapiExample, RunLayersMatchesTheCppApiAndTheReference) {
  for (const Variant& variant : {default_variant(), Variant{QuantProducer::modelopt,
                                                              {WeightFormat::nvfp4, Activations::bf16}, {}}}) {
    SCOPED_TRACE(variant_name(variant));
    const std::filesystem::path model = quantized_model(variant);
    TempDir out("fp4cl-capi-example");
    int status = 0;
    const std::string stdout_text =
        run_command(std::string(FP4CL_EXAMPLE_RUN_LAYERS) + " '" + model.string() + "' '" + out.str() + "' 2>&1", status);
    ASSERT_EQ(status, 0) << stdout_text;
    EXPECT_NE(stdout_text.find("5 quantized layers"), std::string::npos) << stdout_text;
    EXPECT_NE(stdout_text.find("expected error: fp4cl_model_get_linear: model"), std::string::npos) << stdout_text;
    EXPECT_EQ(stdout_text.find("bit-identical: NO"), std::string::npos) << stdout_text;

    std::ifstream names(out.path() / "layers.txt");
    std::string kind, linear_name, moe_name;
    std::int64_t m = 0, tokens = 0;
    int top_k = 0;
    names >> kind >> linear_name >> m;
    ASSERT_EQ(kind, "linear");
    names >> kind >> moe_name >> tokens >> top_k;
    ASSERT_EQ(kind, "moe");

    const Checkpoint ckpt = Checkpoint::open(model);
    // Linear: the C++ API's bits, within the reference.
    const auto x = read_file<std::uint16_t>(out.path() / "linear_x.bin");
    const auto y = read_file<std::uint16_t>(out.path() / "linear_y.bin");
    Linear linear = Linear::from_checkpoint(shared_context(), ckpt, linear_name);
    ASSERT_EQ(static_cast<std::int64_t>(x.size()), m * linear.k());
    std::vector<std::uint16_t> expected;
    linear.run(x, m, expected);
    EXPECT_EQ(y, expected);
    std::vector<float> values;
    for (std::uint16_t b : y) values.push_back(bf16_to_float(b));
    const LoadedLinear loaded = ckpt.load_linear(linear_name);
    EXPECT_EQ(linear_outside_bound(loaded.scheme, loaded.weight, x, m, values, true, linear_name), 0u);
    // The kernel line: the C++ API's description (fp4cl_linear_describe_kernel).
    EXPECT_NE(stdout_text.find("  kernel: " + linear.kernel_description(m) + "\n"), std::string::npos) << stdout_text;

    // MoE: within the reference, and the C++ API's bits.
    const auto mx = read_file<std::uint16_t>(out.path() / "moe_x.bin");
    const auto ids = read_file<std::int32_t>(out.path() / "moe_ids.bin");
    const auto weights = read_file<float>(out.path() / "moe_weights.bin");
    const auto mout = read_file<std::uint16_t>(out.path() / "moe_out.bin");
    reference::MoeReferenceOptions ro;
    ro.scheme = variant.scheme;
    const auto ref = reference::moe_reference(ckpt.load_moe(moe_name).experts, ro, mx,
                                              reference::routing_from_topk(ids, weights, tokens, top_k));
    MoeRun run;
    for (std::uint16_t b : mout) {
      run.values.push_back(bf16_to_float(b));
      run.bits.push_back(b);
    }
    EXPECT_EQ(moe_outside_bound(ref, run, MoeOutput::bf16, moe_name), 0u);
    const Context& ctx = shared_context();
    MoeLayer moe = MoeLayer::from_checkpoint(ctx, ckpt, moe_name);
    EXPECT_NE(stdout_text.find("  kernel: " + moe.kernel_description(tokens) + "\n"), std::string::npos) << stdout_text;
    auto copy = [&](const void* data, std::size_t bytes) {
      return cl::Buffer(ctx.opencl_context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, const_cast<void*>(data));
    };
    const cl::Buffer ob(ctx.opencl_context(), CL_MEM_READ_WRITE, mout.size() * 2);
    moe.forward_topk(copy(mx.data(), mx.size() * 2), copy(ids.data(), ids.size() * 4),
                     copy(weights.data(), weights.size() * 4), ob, tokens);
    std::vector<std::uint16_t> moe_expected(mout.size());
    ASSERT_EQ(ctx.queue().enqueueReadBuffer(ob, CL_TRUE, 0, moe_expected.size() * 2, moe_expected.data()), CL_SUCCESS);
    EXPECT_EQ(mout, moe_expected);
  }
}

TEST(CapiExample, RunLayersFailsWithTheLibrarysMessageOnABadDirectory) {
  int status = 0;
  const std::string text = run_command(std::string(FP4CL_EXAMPLE_RUN_LAYERS) + " /nonexistent/model 2>&1", status);
  EXPECT_NE(status, 0);
  EXPECT_NE(text.find("FP4CL_ERROR_INVALID_MODEL"), std::string::npos) << text;
  EXPECT_NE(text.find("/nonexistent/model"), std::string::npos) << text;
}

}  // namespace
}  // namespace fp4cl::test
