// What the host spends enqueueing small commands on an in-order queue, with profiling and without:
// the medians over CALLS rounds of clSetKernelArg (a kernel of 30 arguments: 20 buffers, 10 ints),
// clEnqueueNDRangeKernel (the first after a clFinish, then without and with an event, then with a
// one-event wait list), a 16-byte non-blocking clEnqueueWriteBuffer and clEnqueueFillBuffer, and
// clFinish of an idle queue. A MoE layer's call is a few of these (host/layers/moe.cpp,
// moe_pipeline.cpp); `fp4cl-bench moe --launches` prints a call's host time inside the enqueue
// next to its device time.
//
//   cc -O2 bench/standalone/enqueue_costs.c -o enqueue_costs -lOpenCL
//   ./enqueue_costs [CALLS=200]
// The first GPU device if there is one, else the first device (FP4CL-independent: no fp4cl code).
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char* source =
    "__kernel void k30(__global float* b0, __global float* b1, __global float* b2, __global float* b3,\n"
    "  __global float* b4, __global float* b5, __global float* b6, __global float* b7, __global float* b8,\n"
    "  __global float* b9, __global float* b10, __global float* b11, __global float* b12, __global float* b13,\n"
    "  __global float* b14, __global float* b15, __global float* b16, __global float* b17, __global float* b18,\n"
    "  __global float* b19, int i0, int i1, int i2, int i3, int i4, int i5, int i6, int i7, int i8, int i9) {\n"
    "  if (get_global_id(0) == 0 && i0 == 12345) b0[0] = b19[0] + (float)(i1 + i2 + i3 + i4 + i5 + i6 + i7 + i8 + i9);\n"
    "}\n";

enum { kBuffers = 20, kInts = 10 };

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
    fprintf(stderr, "enqueue_costs: %s failed: %d\n", what, err);
    exit(1);
  }
}

static void measure(cl_command_queue q, cl_kernel k, cl_mem* bufs, int calls, const char* name, const char* label) {
  const size_t global = 64, local = 64;
  const cl_int pattern[4] = {0x7fffffff, 0x7fffffff, 0, 0};
  double* t_args = malloc(sizeof(double) * calls);
  double* t_first = malloc(sizeof(double) * calls);
  double* t_event = malloc(sizeof(double) * calls);
  double* t_noevent = malloc(sizeof(double) * calls);
  double* t_wait = malloc(sizeof(double) * calls);
  double* t_write = malloc(sizeof(double) * calls);
  double* t_fill = malloc(sizeof(double) * calls);
  double* t_finish = malloc(sizeof(double) * calls);
  for (int c = 0; c < calls + 5; ++c) {
    const int i = c < 5 ? 0 : c - 5;  // 5 warm-up rounds, overwritten
    double t0 = now_us();
    for (int a = 0; a < kBuffers; ++a) check(clSetKernelArg(k, (cl_uint)a, sizeof(cl_mem), &bufs[(a + c) % kBuffers]), "clSetKernelArg");
    for (int a = 0; a < kInts; ++a) {
      const cl_int v = c + a;
      check(clSetKernelArg(k, (cl_uint)(kBuffers + a), sizeof(cl_int), &v), "clSetKernelArg");
    }
    double t1 = now_us();
    t_args[i] = t1 - t0;
    cl_event ev0, ev, ev2;
    t0 = now_us();
    check(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev0), "clEnqueueNDRangeKernel");
    t1 = now_us();
    t_first[i] = t1 - t0;
    t0 = now_us();
    check(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL), "clEnqueueNDRangeKernel");
    t1 = now_us();
    t_noevent[i] = t1 - t0;
    t0 = now_us();
    check(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, &ev), "clEnqueueNDRangeKernel");
    t1 = now_us();
    t_event[i] = t1 - t0;
    t0 = now_us();
    check(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 1, &ev, &ev2), "clEnqueueNDRangeKernel");
    t1 = now_us();
    t_wait[i] = t1 - t0;
    t0 = now_us();
    check(clEnqueueWriteBuffer(q, bufs[0], CL_FALSE, 0, 16, pattern, 0, NULL, NULL), "clEnqueueWriteBuffer");
    t1 = now_us();
    t_write[i] = t1 - t0;
    t0 = now_us();
    check(clEnqueueFillBuffer(q, bufs[1], pattern, 16, 0, 16, 0, NULL, NULL), "clEnqueueFillBuffer");
    t1 = now_us();
    t_fill[i] = t1 - t0;
    check(clFinish(q), "clFinish");
    t0 = now_us();
    check(clFinish(q), "clFinish");
    t1 = now_us();
    t_finish[i] = t1 - t0;
    clReleaseEvent(ev0);
    clReleaseEvent(ev);
    clReleaseEvent(ev2);
  }
  printf("%s, %s, medians of %d rounds (us of host time):\n", name, label, calls);
  printf("  clSetKernelArg x%d (%d buffers, %d ints): %.2f (%.3f each)\n", kBuffers + kInts, kBuffers, kInts,
         median(t_args, calls), median(t_args, calls) / (kBuffers + kInts));
  printf("  clEnqueueNDRangeKernel with an event, the first after a clFinish: %.2f\n", median(t_first, calls));
  printf("  clEnqueueNDRangeKernel without an event (the second): %.2f\n", median(t_noevent, calls));
  printf("  clEnqueueNDRangeKernel with an event (the third): %.2f\n", median(t_event, calls));
  printf("  clEnqueueNDRangeKernel with a one-event wait list and an event: %.2f\n", median(t_wait, calls));
  printf("  clEnqueueWriteBuffer 16 bytes, non-blocking: %.2f\n", median(t_write, calls));
  printf("  clEnqueueFillBuffer 16 bytes: %.2f\n", median(t_fill, calls));
  printf("  clFinish of an idle queue: %.2f\n", median(t_finish, calls));
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 200;
  if (calls < 1) return 2;
  cl_int err;
  cl_uint np = 0;
  check(clGetPlatformIDs(0, NULL, &np), "clGetPlatformIDs");
  if (np == 0) {
    fprintf(stderr, "enqueue_costs: no OpenCL platform\n");
    return 1;
  }
  cl_platform_id platforms[16];
  check(clGetPlatformIDs(np > 16 ? 16 : np, platforms, NULL), "clGetPlatformIDs");
  cl_device_id device = NULL;
  for (cl_uint p = 0; p < np && p < 16 && !device; ++p)
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_GPU, 1, &device, NULL) != CL_SUCCESS) device = NULL;
  for (cl_uint p = 0; p < np && p < 16 && !device; ++p)
    if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) device = NULL;
  if (!device) {
    fprintf(stderr, "enqueue_costs: no OpenCL device\n");
    return 1;
  }
  char name[256] = {0};
  clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof(name) - 1, name, NULL);
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  check(err, "clCreateContext");
  cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
  check(err, "clCreateProgramWithSource");
  check(clBuildProgram(prog, 1, &device, "", NULL, NULL), "clBuildProgram");
  cl_kernel k = clCreateKernel(prog, "k30", &err);
  check(err, "clCreateKernel");
  cl_mem bufs[kBuffers];
  for (int i = 0; i < kBuffers; ++i) {
    bufs[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &err);
    check(err, "clCreateBuffer");
  }
  const cl_command_queue_properties kinds[2] = {CL_QUEUE_PROFILING_ENABLE, 0};
  const char* labels[2] = {"a profiling queue", "a queue without profiling"};
  for (int i = 0; i < 2; ++i) {
    cl_command_queue q = clCreateCommandQueue(ctx, device, kinds[i], &err);
    check(err, "clCreateCommandQueue");
    measure(q, k, bufs, calls, name, labels[i]);
    clReleaseCommandQueue(q);
  }
  return 0;
}
