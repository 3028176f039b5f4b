// An outside C++ program on the installed libfp4cl.so: the public C++ API (Context, Checkpoint,
// Linear, MoeLayer, fp4cl::Error caught across the library boundary) and the C API in one
// program, which must agree bit for bit.
#include <fp4cl/checkpoint.hpp>
#include <fp4cl/error.hpp>
#include <fp4cl/fp4cl.h>
#include <fp4cl/linear.hpp>
#include <fp4cl/moe.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cpp_consumer MODEL_DIR\n");
    return 2;
  }
  try {
    fp4cl::Checkpoint::open("/nonexistent/fp4cl-consumer-model");
    std::fprintf(stderr, "cpp_consumer: opening a missing directory did not throw\n");
    return 1;
  } catch (const fp4cl::Error& e) {
    std::printf("caught fp4cl::Error: %s\n", e.what());
  }
  const fp4cl::Context ctx = fp4cl::Context::create();
  const fp4cl::Checkpoint ckpt = fp4cl::Checkpoint::open(argv[1]);
  std::string name;
  for (const fp4cl::CheckpointLayer& l : ckpt.layers()) {
    if (l.kind == fp4cl::LayerKind::linear) {
      name = l.name;
      break;
    }
  }
  fp4cl::Linear linear = fp4cl::Linear::from_checkpoint(ctx, ckpt, name);
  const std::int64_t m = 2;
  std::vector<std::uint16_t> x(static_cast<std::size_t>(m * linear.k()));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(0x3C00 + (i * 7) % 512);  // ~[0.0078, 0.03]
  std::vector<std::uint16_t> y_cpp, y_c(static_cast<std::size_t>(m * linear.n()));
  linear.run(x, m, y_cpp);

  fp4cl_context* c = nullptr;
  fp4cl_model* model = nullptr;
  fp4cl_linear* layer = nullptr;
  if (fp4cl_context_create(nullptr, &c) != FP4CL_SUCCESS || fp4cl_model_open(c, argv[1], &model) != FP4CL_SUCCESS ||
      fp4cl_model_get_linear(model, name.c_str(), nullptr, &layer) != FP4CL_SUCCESS ||
      fp4cl_linear_run(layer, x.data(), x.size() * 2, m, y_c.data(), y_c.size() * 2) != FP4CL_SUCCESS) {
    std::fprintf(stderr, "cpp_consumer: C API failed: %s\n", fp4cl_last_error());
    return 1;
  }
  fp4cl_linear_release(layer);
  fp4cl_model_release(model);
  fp4cl_context_release(c);
  const bool same = y_cpp == y_c;
  std::printf("%s on %s: C++ and C API outputs bit-identical: %s\n", name.c_str(), ctx.info().name.c_str(),
              same ? "yes" : "NO");
  fp4cl::MoeLayer moe = fp4cl::MoeLayer::from_checkpoint(ctx, ckpt, ckpt.moe_layers().at(0).name);
  std::printf("MoE layer %s: E = %lld, H = %lld, top-k = %d\n", ckpt.moe_layers().at(0).name.c_str(),
              static_cast<long long>(moe.num_global_experts()), static_cast<long long>(moe.hidden()), moe.top_k());
  return same ? 0 : 1;
}
