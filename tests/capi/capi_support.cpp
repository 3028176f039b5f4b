#include "capi/capi_support.hpp"

#include "fp4cl/opencl.hpp"

namespace fp4cl::test {

Variant default_variant() {
  Variant v;
  v.layout = QuantProducer::compressed_tensors;
  v.scheme = {WeightFormat::nvfp4, Activations::fp4_dynamic};
  return v;
}

fp4cl_context* c_context() {
  static ContextPtr ctx = [] {
    fp4cl_context* c = nullptr;
    const fp4cl_status s = fp4cl_context_create(nullptr, &c);
    if (s != FP4CL_SUCCESS) ADD_FAILURE() << fp4cl_last_error();
    return ContextPtr(c);
  }();
  return ctx.get();
}

ModelPtr open_model(const Variant& variant) {
  fp4cl_model* m = nullptr;
  const std::string dir = quantized_model(variant).string();
  EXPECT_EQ(fp4cl_model_open(c_context(), dir.c_str(), &m), FP4CL_SUCCESS) << fp4cl_last_error();
  return ModelPtr(m);
}

LinearPtr get_linear(fp4cl_model* model, const char* name, const fp4cl_linear_options* options) {
  fp4cl_linear* l = nullptr;
  EXPECT_EQ(fp4cl_model_get_linear(model, name, options, &l), FP4CL_SUCCESS) << fp4cl_last_error();
  return LinearPtr(l);
}

MoePtr get_moe(fp4cl_model* model, const char* name, const fp4cl_moe_options* options) {
  fp4cl_moe* m = nullptr;
  EXPECT_EQ(fp4cl_model_get_moe(model, name, options, &m), FP4CL_SUCCESS) << fp4cl_last_error();
  return MoePtr(m);
}

void expect_error(fp4cl_status status, fp4cl_status expected, const std::vector<std::string>& fragments) {
  EXPECT_EQ(status, expected) << fp4cl_status_name(status) << " instead of " << fp4cl_status_name(expected) << ": "
                              << fp4cl_last_error();
  const std::string message = fp4cl_last_error();
  for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << "'" << f << "' not in: " << message;
}

const CallerQueue& caller_queue() {
  static struct Owned {
    CallerQueue q;
    Owned() {
      EXPECT_EQ(fp4cl_context_get_cl(c_context(), nullptr, nullptr, &q.device), FP4CL_SUCCESS);
      cl_int err = CL_SUCCESS;
      q.context = clCreateContext(nullptr, 1, &q.device, nullptr, nullptr, &err);
      EXPECT_EQ(err, CL_SUCCESS);
      q.queue = clCreateCommandQueue(q.context, q.device, 0, &err);
      EXPECT_EQ(err, CL_SUCCESS);
    }
    ~Owned() {
      if (q.queue) clReleaseCommandQueue(q.queue);
      if (q.context) clReleaseContext(q.context);
    }
  } owned;
  return owned.q;
}

cl_mem create_buffer(cl_context context, std::size_t bytes, const void* data) {
  cl_int err = CL_SUCCESS;
  cl_mem b = clCreateBuffer(context, CL_MEM_READ_WRITE | (data ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                            const_cast<void*>(data), &err);
  EXPECT_EQ(err, CL_SUCCESS);
  return b;
}

}  // namespace fp4cl::test
