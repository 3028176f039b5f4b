/* run_layers: the fp4cl C API from C. Loads a model directory, lists its quantized layers, runs
 * its first linear layer and its first MoE layer on host arrays and again asynchronously on
 * OpenCL buffers of the caller (with events), checks that both paths give the same bits, and
 * prints the results.
 *
 *   run_layers MODEL_DIR [OUT_DIR]
 *
 * The device is FP4CL_DEVICE's (else the default one). With OUT_DIR, the inputs and outputs are
 * written there as raw little-endian files (layers.txt names the layers) so that a test can check
 * them against the C++ API and the scalar reference. Exit status 0 on success. */
#include <fp4cl/fp4cl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    fp4cl_status status_ = (call);                                                                      \
    if (status_ != FP4CL_SUCCESS) {                                                                     \
      fprintf(stderr, "run_layers: %s failed: %s: %s\n", #call, fp4cl_status_name(status_),            \
              fp4cl_last_error());                                                                      \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

#define CHECK_CL(call)                                                                                  \
  do {                                                                                                  \
    cl_int err_ = (call);                                                                               \
    if (err_ != CL_SUCCESS) {                                                                           \
      fprintf(stderr, "run_layers: %s failed: OpenCL status %d\n", #call, (int)err_);                  \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "run_layers: out of memory\n");
    exit(1);
  }
  return p;
}

/* BF16 bits of a float that BF16 holds exactly (the test inputs below are such values). */
static uint16_t exact_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)(bits >> 16);
}

static float bf16_value(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Deterministic activations: multiples of 1/32 in [-1.5, 1.5], exact in BF16. */
static void fill_activations(uint16_t* x, size_t count, unsigned salt) {
  for (size_t i = 0; i < count; ++i) x[i] = exact_bf16((float)((int)((i * 37u + salt) % 97u) - 48) / 32.0f);
}

static void write_file(const char* dir, const char* name, const void* data, size_t bytes) {
  char path[4096];
  FILE* f;
  if (!dir) return;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  f = fopen(path, "wb");
  if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
    fprintf(stderr, "run_layers: cannot write %s\n", path);
    exit(1);
  }
}

static void print_values(const char* what, const uint16_t* y, size_t count) {
  double sum = 0.0;
  size_t i;
  printf("  %s:", what);
  for (i = 0; i < count && i < 6; ++i) printf(" %.6g", bf16_value(y[i]));
  for (i = 0; i < count; ++i) sum += bf16_value(y[i]);
  printf(" ... (%zu values, sum %.6g)\n", count, sum);
}

/* Copies host bytes into a new buffer of the context, asynchronously; *written completes after. */
static cl_mem upload(cl_context context, cl_command_queue queue, const void* data, size_t bytes, cl_event* written) {
  cl_int err;
  cl_mem b = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  CHECK_CL(err);
  CHECK_CL(clEnqueueWriteBuffer(queue, b, CL_FALSE, 0, bytes, data, 0, NULL, written));
  return b;
}

static int run_linear(fp4cl_context* ctx, fp4cl_model* model, size_t index, const char* out_dir, FILE* names) {
  fp4cl_linear* layer;
  fp4cl_linear_info info;
  fp4cl_layer_info layer_info;
  const int64_t m = 3;
  uint16_t *x, *y, *y_async;
  size_t x_count, y_count;
  cl_context context;
  cl_command_queue queue;
  cl_mem x_mem, y_mem;
  cl_event written, done;
  cl_int err;
  int same;

  CHECK(fp4cl_model_layer_info(model, index, &layer_info));
  CHECK(fp4cl_model_get_linear_at(model, index, NULL, &layer));
  CHECK(fp4cl_linear_get_info(layer, &info));
  x_count = (size_t)(m * info.k);
  y_count = (size_t)(m * info.n);
  x = xmalloc(x_count * 2);
  y = xmalloc(y_count * 2);
  y_async = xmalloc(y_count * 2);
  fill_activations(x, x_count, 1);

  /* Host arrays, synchronous. */
  CHECK(fp4cl_linear_run(layer, x, x_count * 2, m, y, y_count * 2));

  /* The caller's buffers on fp4cl's context and queue, asynchronous with events. */
  CHECK(fp4cl_context_get_cl(ctx, &context, &queue, NULL));
  x_mem = upload(context, queue, x, x_count * 2, &written);
  y_mem = clCreateBuffer(context, CL_MEM_READ_WRITE, y_count * 2, NULL, &err);
  CHECK_CL(err);
  CHECK(fp4cl_linear_enqueue(layer, x_mem, y_mem, m, 1, &written, &done));
  CHECK_CL(clEnqueueReadBuffer(queue, y_mem, CL_TRUE, 0, y_count * 2, y_async, 1, &done, NULL));
  same = memcmp(y, y_async, y_count * 2) == 0;

  printf("linear %s: [%lld x %lld] weight, m = %lld\n", layer_info.name, (long long)info.n, (long long)info.k,
         (long long)m);
  {
    char kernel[512]; /* cut to 511 bytes if longer */
    CHECK(fp4cl_linear_describe_kernel(layer, m, kernel, sizeof kernel, NULL));
    printf("  kernel: %s\n", kernel);
  }
  print_values("y", y, y_count);
  printf("  host and cl_mem paths bit-identical: %s\n", same ? "yes" : "NO");
  if (names) fprintf(names, "linear %s %lld\n", layer_info.name, (long long)m);
  write_file(out_dir, "linear_x.bin", x, x_count * 2);
  write_file(out_dir, "linear_y.bin", y, y_count * 2);

  clReleaseEvent(written);
  clReleaseEvent(done);
  clReleaseMemObject(x_mem);
  clReleaseMemObject(y_mem);
  free(x);
  free(y);
  free(y_async);
  fp4cl_linear_release(layer);
  return same;
}

static int run_moe(fp4cl_context* ctx, fp4cl_model* model, size_t index, const char* out_dir, FILE* names) {
  fp4cl_moe* layer;
  fp4cl_moe_info info;
  fp4cl_layer_info layer_info;
  const int64_t tokens = 5;
  uint16_t *x, *out, *out_async;
  int32_t* ids;
  float* weights;
  size_t x_count, pairs, t, s;
  cl_context context;
  cl_command_queue queue;
  cl_mem x_mem, ids_mem, weights_mem, out_mem;
  cl_event inputs[3], done;
  cl_int err;
  int same;

  CHECK(fp4cl_model_layer_info(model, index, &layer_info));
  CHECK(fp4cl_model_get_moe_at(model, index, NULL, &layer));
  CHECK(fp4cl_moe_get_info(layer, &info));
  x_count = (size_t)(tokens * info.hidden);
  pairs = (size_t)tokens * (size_t)info.top_k;
  x = xmalloc(x_count * 2);
  out = xmalloc(x_count * 2);
  out_async = xmalloc(x_count * 2);
  ids = xmalloc(pairs * sizeof *ids);
  weights = xmalloc(pairs * sizeof *weights);
  fill_activations(x, x_count, 7);
  /* Token t goes to experts t, t+1, ... (mod E) with weights k, k-1, ... normalized. */
  for (t = 0; t < (size_t)tokens; ++t) {
    float total = 0.0f;
    for (s = 0; s < (size_t)info.top_k; ++s) total += (float)(info.top_k - (int32_t)s);
    for (s = 0; s < (size_t)info.top_k; ++s) {
      ids[t * (size_t)info.top_k + s] = (int32_t)((t + s) % (size_t)info.num_experts);
      weights[t * (size_t)info.top_k + s] = (float)(info.top_k - (int32_t)s) / total;
    }
  }

  CHECK(fp4cl_moe_run(layer, x, x_count * 2, ids, pairs * 4, weights, pairs * 4, tokens, out, x_count * 2));

  CHECK(fp4cl_context_get_cl(ctx, &context, &queue, NULL));
  x_mem = upload(context, queue, x, x_count * 2, &inputs[0]);
  ids_mem = upload(context, queue, ids, pairs * 4, &inputs[1]);
  weights_mem = upload(context, queue, weights, pairs * 4, &inputs[2]);
  out_mem = clCreateBuffer(context, CL_MEM_READ_WRITE, x_count * 2, NULL, &err);
  CHECK_CL(err);
  CHECK(fp4cl_moe_enqueue(layer, x_mem, ids_mem, weights_mem, out_mem, tokens, 3, inputs, &done));
  CHECK_CL(clEnqueueReadBuffer(queue, out_mem, CL_TRUE, 0, x_count * 2, out_async, 1, &done, NULL));
  CHECK(fp4cl_moe_finish(layer)); /* reports an invalid expert id of the asynchronous call */
  same = memcmp(out, out_async, x_count * 2) == 0;

  printf("moe %s: E = %lld, H = %lld, I = %lld, top-k = %d, %lld tokens\n", layer_info.name,
         (long long)info.num_experts, (long long)info.hidden, (long long)info.intermediate, (int)info.top_k,
         (long long)tokens);
  {
    char kernel[512];
    CHECK(fp4cl_moe_describe_kernel(layer, tokens, kernel, sizeof kernel, NULL));
    printf("  kernel: %s\n", kernel);
  }
  print_values("out", out, x_count);
  printf("  host and cl_mem paths bit-identical: %s\n", same ? "yes" : "NO");
  if (names) fprintf(names, "moe %s %lld %d\n", layer_info.name, (long long)tokens, (int)info.top_k);
  write_file(out_dir, "moe_x.bin", x, x_count * 2);
  write_file(out_dir, "moe_ids.bin", ids, pairs * 4);
  write_file(out_dir, "moe_weights.bin", weights, pairs * 4);
  write_file(out_dir, "moe_out.bin", out, x_count * 2);

  for (t = 0; t < 3; ++t) clReleaseEvent(inputs[t]);
  clReleaseEvent(done);
  clReleaseMemObject(x_mem);
  clReleaseMemObject(ids_mem);
  clReleaseMemObject(weights_mem);
  clReleaseMemObject(out_mem);
  free(x);
  free(out);
  free(out_async);
  free(ids);
  free(weights);
  fp4cl_moe_release(layer);
  return same;
}

int main(int argc, char** argv) {
  fp4cl_context* ctx;
  fp4cl_model* model;
  fp4cl_linear* missing = NULL;
  size_t count, i, first_linear = (size_t)-1, first_moe = (size_t)-1;
  const char* out_dir = argc > 2 ? argv[2] : NULL;
  FILE* names = NULL;
  int ok = 1;

  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s MODEL_DIR [OUT_DIR]\n", argv[0]);
    return 2;
  }
  printf("fp4cl %s (header %d.%d.%d)\n", fp4cl_version_string(), FP4CL_VERSION_MAJOR, FP4CL_VERSION_MINOR,
         FP4CL_VERSION_PATCH);
  CHECK(fp4cl_context_create(NULL, &ctx));
  printf("device: %s\n", fp4cl_context_device_description(ctx));
  CHECK(fp4cl_model_open(ctx, argv[1], &model));
  CHECK(fp4cl_model_layer_count(model, &count));
  printf("%zu quantized layers:\n", count);
  for (i = 0; i < count; ++i) {
    fp4cl_layer_info info;
    CHECK(fp4cl_model_layer_info(model, i, &info));
    printf("  %2zu %-6s %s %s %s\n", i, info.kind == FP4CL_LAYER_MOE ? "moe" : "linear",
           info.weight_format == FP4CL_WEIGHT_NVFP4 ? "NVFP4" : "MXFP4",
           info.activations == FP4CL_ACTIVATIONS_FP4 ? "W4A4 " : "W4A16", info.name);
    if (info.kind == FP4CL_LAYER_LINEAR && first_linear == (size_t)-1) first_linear = i;
    if (info.kind == FP4CL_LAYER_MOE && first_moe == (size_t)-1) first_moe = i;
  }

  /* Errors come back as a status and a message. */
  if (fp4cl_model_get_linear(model, "no.such.layer", NULL, &missing) == FP4CL_SUCCESS || missing != NULL) {
    fprintf(stderr, "run_layers: a missing layer was found\n");
    return 1;
  }
  printf("expected error: %s\n", fp4cl_last_error());

  if (out_dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/layers.txt", out_dir);
    names = fopen(path, "w");
    if (!names) {
      fprintf(stderr, "run_layers: cannot write %s\n", path);
      return 1;
    }
  }
  if (first_linear != (size_t)-1) ok &= run_linear(ctx, model, first_linear, out_dir, names);
  if (first_moe != (size_t)-1) ok &= run_moe(ctx, model, first_moe, out_dir, names);
  if (names && fclose(names) != 0) ok = 0;

  fp4cl_model_release(model);
  fp4cl_context_release(ctx);
  return ok ? 0 : 1;
}
