// What the host spends in clEnqueueNDRangeKernel by the kernel's arguments: kernels of 0 to 20
// buffer arguments and 0 to 10 int arguments (buffers distinct and small, one buffer repeated, or
// distinct and 64 MB), enqueued without and with an event, on an in-order queue without profiling
// and on one with it; medians over CALLS rounds, each round ending in clFinish. The arguments are
// set once per kernel: the cost measured is the enqueue's own. (enqueue_costs.c measures the rest
// of a call's host work: clSetKernelArg, wait lists, small writes and fills, clFinish.)
//
//   cc -O2 bench/standalone/enqueue_by_args.c -o enqueue_by_args -lOpenCL
//   ./enqueue_by_args [CALLS=300]         (the first GPU; ENQUEUE_ANY_DEVICE=1: any device)
//
// Measured on an NVIDIA H100 (driver's OpenCL, 2026-11-25, 300 rounds), µs: no arguments 4.6;
// each int argument ~0.08 (10 ints 5.4); each buffer argument ~0.3 (1 buffer 4.7, 4 5.5, 12 8.0,
// 20 10.6; the same whether the buffers are distinct, one repeated, 4 KB or 64 MB); 20 buffers
// and 10 ints 11.4. An event adds ~1.8 on a queue without profiling and ~7.5 on one with it (20
// buffers and 10 ints: 13.2 and 18.0).
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char* source =
    "#define B(n) __global float* b##n\n"
    "#define I(n) int i##n\n"
    "__kernel void k0(void) {}\n"
    "__kernel void k4i(B(0), I(0), I(1), I(2), I(3)) {\n"
    "  if (get_global_id(0) == 100000 + i0) b0[0] = i1 + i2 + i3;\n"
    "}\n"
    "__kernel void k10i(B(0), I(0), I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), I(9)) {\n"
    "  if (get_global_id(0) == 100000 + i0) b0[0] = i1 + i2 + i3 + i4 + i5 + i6 + i7 + i8 + i9;\n"
    "}\n"
    "__kernel void k1b(B(0)) { if (get_global_id(0) == 100000) b0[0] = 1; }\n"
    "__kernel void k4b(B(0), B(1), B(2), B(3)) { if (get_global_id(0) == 100000) b0[0] = b3[0]; }\n"
    "__kernel void k12b(B(0), B(1), B(2), B(3), B(4), B(5), B(6), B(7), B(8), B(9), B(10), B(11)) {\n"
    "  if (get_global_id(0) == 100000) b0[0] = b11[0];\n"
    "}\n"
    "__kernel void k20b(B(0), B(1), B(2), B(3), B(4), B(5), B(6), B(7), B(8), B(9), B(10), B(11), B(12),\n"
    "                   B(13), B(14), B(15), B(16), B(17), B(18), B(19)) {\n"
    "  if (get_global_id(0) == 100000) b0[0] = b19[0];\n"
    "}\n"
    "__kernel void k20b10i(B(0), B(1), B(2), B(3), B(4), B(5), B(6), B(7), B(8), B(9), B(10), B(11), B(12),\n"
    "                      B(13), B(14), B(15), B(16), B(17), B(18), B(19), I(0), I(1), I(2), I(3), I(4),\n"
    "                      I(5), I(6), I(7), I(8), I(9)) {\n"
    "  if (get_global_id(0) == 100000 + i0) b0[0] = b19[0] + i1 + i2 + i3 + i4 + i5 + i6 + i7 + i8 + i9;\n"
    "}\n";

enum { kKernels = 8, kMaxBuffers = 20 };
static const char* const kNames[kKernels] = {"k0", "k4i", "k10i", "k1b", "k4b", "k12b", "k20b", "k20b10i"};
static const int kBufferArgs[kKernels] = {0, 1, 1, 1, 4, 12, 20, 20};
static const int kIntArgs[kKernels] = {0, 4, 10, 0, 0, 0, 0, 10};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), by_value);
  return v[n / 2];
}

static void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS) {
    fprintf(stderr, "enqueue_by_args: %s failed: %d\n", what, err);
    exit(1);
  }
}

// Buffers of a kernel's arguments: 0 distinct 4 KB ones, 1 one 4 KB buffer repeated, 2 distinct 64 MB ones.
static const char* const kBufferKinds[3] = {"distinct 4 KB buffers", "one buffer repeated", "distinct 64 MB buffers"};

static void measure(cl_command_queue q, cl_program prog, int kernel, int kind, cl_mem* small, cl_mem* big, int calls,
                    const char* label) {
  cl_int err;
  cl_kernel k = clCreateKernel(prog, kNames[kernel], &err);
  check(err, "clCreateKernel");
  for (int a = 0; a < kBufferArgs[kernel]; ++a) {
    const cl_mem m = kind == 0 ? small[a] : kind == 1 ? small[0] : big[a];
    check(clSetKernelArg(k, (cl_uint)a, sizeof(cl_mem), &m), "clSetKernelArg");
  }
  for (int a = 0; a < kIntArgs[kernel]; ++a) {
    const cl_int v = a + 1;
    check(clSetKernelArg(k, (cl_uint)(kBufferArgs[kernel] + a), sizeof(cl_int), &v), "clSetKernelArg");
  }
  const size_t global = 65536, local = 128;
  double* plain = malloc(sizeof(double) * (size_t)calls);
  double* with_event = malloc(sizeof(double) * (size_t)calls);
  for (int c = 0; c < calls + 10; ++c) {
    const int i = c < 10 ? 0 : c - 10;  // 10 warm-up rounds, overwritten
    cl_event ev;
    double t0 = now_us();
    check(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL), "clEnqueueNDRangeKernel");
    plain[i] = now_us() - t0;
    t0 = now_us();
    check(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev), "clEnqueueNDRangeKernel");
    with_event[i] = now_us() - t0;
    check(clFinish(q), "clFinish");
    clReleaseEvent(ev);
  }
  char args[64];
  snprintf(args, sizeof(args), "%d buffers, %d ints", kBufferArgs[kernel], kIntArgs[kernel]);
  printf("%s, %-8s (%-19s%s%s): %.2f us without an event, %.2f with one\n", label, kNames[kernel], args,
         kBufferArgs[kernel] > 1 ? "; " : "", kBufferArgs[kernel] > 1 ? kBufferKinds[kind] : "", median(plain, calls),
         median(with_event, calls));
  free(plain);
  free(with_event);
  clReleaseKernel(k);
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 300;
  if (calls < 1) return 2;
  cl_int err;
  cl_platform_id platforms[16];
  cl_uint np = 0;
  check(clGetPlatformIDs(16, platforms, &np), "clGetPlatformIDs");
  const cl_device_type type = getenv("ENQUEUE_ANY_DEVICE") ? CL_DEVICE_TYPE_ALL : CL_DEVICE_TYPE_GPU;
  cl_device_id device = NULL;
  for (cl_uint p = 0; p < np && p < 16 && !device; ++p)
    if (clGetDeviceIDs(platforms[p], type, 1, &device, NULL) != CL_SUCCESS) device = NULL;
  if (!device) {
    fprintf(stderr, "enqueue_by_args: no %s device (ENQUEUE_ANY_DEVICE=1 takes any)\n",
            type == CL_DEVICE_TYPE_GPU ? "GPU" : "OpenCL");
    return 1;
  }
  char name[256] = {0};
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof(name) - 1, name, NULL);
  printf("%s, medians of %d rounds (us of host time in clEnqueueNDRangeKernel)\n", name, calls);
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  check(err, "clCreateContext");
  cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
  check(err, "clCreateProgramWithSource");
  if (clBuildProgram(prog, 1, &device, "", NULL, NULL) != CL_SUCCESS) {
    char log[8192] = {0};
    clGetProgramBuildInfo(prog, device, CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log, NULL);
    fprintf(stderr, "enqueue_by_args: clBuildProgram failed:\n%s\n", log);
    return 1;
  }
  cl_mem small[kMaxBuffers], big[kMaxBuffers];
  for (int i = 0; i < kMaxBuffers; ++i) {
    small[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
    check(err, "clCreateBuffer");
    big[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)64 << 20, NULL, &err);
    check(err, "clCreateBuffer");
  }
  const cl_command_queue_properties kinds[2] = {0, CL_QUEUE_PROFILING_ENABLE};
  const char* labels[2] = {"no profiling", "profiling"};
  for (int qi = 0; qi < 2; ++qi) {
    cl_command_queue q = clCreateCommandQueue(ctx, device, kinds[qi], &err);
    check(err, "clCreateCommandQueue");
    for (int k = 0; k < kKernels; ++k)
      for (int kind = 0; kind < (kBufferArgs[k] > 1 && kIntArgs[k] == 0 ? 3 : 1); ++kind)
        measure(q, prog, k, kind, small, big, calls, labels[qi]);
    clReleaseCommandQueue(q);
  }
  return 0;
}
