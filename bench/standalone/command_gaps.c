// What an OpenCL runtime spends between commands: a chain of identical kernels on one in-order
// profiling queue, each work-group summing its own span of a buffer (8 buffers taking turns, so
// large spans come from DRAM). Prints the medians of each command's duration and of the gaps
// from one command's end to the next one's start (event profiling), and of the whole chain.
// Written for PoCL on the CI machine (README, "PoCL decode: small layers on huge pages, and what
// a command costs"), where every command wakes PoCL's other worker thread, whose vCPU has halted.
//
//   cc -O2 bench/standalone/command_gaps.c -o command_gaps -lOpenCL
//   ./command_gaps WORK_GROUPS FLOAT16S_PER_GROUP CHAIN [CALLS=50]
//   e.g. ./command_gaps 128 64 5: 128 work-groups of 4 KB, chains of 5 commands
//
// SPIN=1 polls the last command's status before clFinish (the host thread then keeps its core
// busy: the diagnostic of the README entry; fp4cl does not do this).
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

static const char* source =
    "__kernel void work(__global const float16* in, __global float* out, uint per_group) {\n"
    "  const uint g = get_group_id(0);\n"
    "  float16 s = 0;\n"
    "  const __global float16* p = in + (size_t)g * per_group;\n"
    "  for (uint i = 0; i < per_group; ++i) s += p[i];\n"
    "  if (get_local_id(0) == 0) out[g] = s.s0 + s.s5 + s.sf;\n"
    "}\n";

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS) {
    fprintf(stderr, "command_gaps: %s failed: %d\n", what, err);
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s WORK_GROUPS FLOAT16S_PER_GROUP CHAIN [CALLS]\n", argv[0]);
    return 2;
  }
  const int groups = atoi(argv[1]), chain = atoi(argv[3]), calls = argc > 4 ? atoi(argv[4]) : 50;
  cl_uint per_group = (cl_uint)atoi(argv[2]);
  if (groups < 1 || chain < 1 || calls < 1) return 2;
  cl_int err;
  cl_platform_id platform;
  cl_device_id device;
  check(clGetPlatformIDs(1, &platform, NULL), "clGetPlatformIDs");
  check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL), "clGetDeviceIDs");
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  check(err, "clCreateContext");
  cl_command_queue q = clCreateCommandQueue(ctx, device, CL_QUEUE_PROFILING_ENABLE, &err);
  check(err, "clCreateCommandQueue");
  cl_program program = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
  check(err, "clCreateProgramWithSource");
  check(clBuildProgram(program, 1, &device, "", NULL, NULL), "clBuildProgram");
  cl_kernel kernel = clCreateKernel(program, "work", &err);
  check(err, "clCreateKernel");
  const size_t bytes = (size_t)groups * per_group * 64 + 64;
  cl_mem in[8];
  const float one = 1.0f;
  for (int i = 0; i < 8; ++i) {
    in[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    check(err, "clCreateBuffer");
    check(clEnqueueFillBuffer(q, in[i], &one, sizeof one, 0, bytes, 0, NULL, NULL), "clEnqueueFillBuffer");
  }
  cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)groups * 4, NULL, &err);
  check(err, "clCreateBuffer");
  check(clFinish(q), "clFinish");
  double* gaps = malloc(sizeof(double) * (size_t)calls * (size_t)chain);
  double* durations = malloc(sizeof(double) * (size_t)calls * (size_t)chain);
  double* totals = malloc(sizeof(double) * (size_t)calls);
  cl_event* events = malloc(sizeof(cl_event) * (size_t)chain);
  int n_gaps = 0, n_durations = 0;
  for (int call = -3; call < calls; ++call) {  // 3 warm-up chains
    for (int j = 0; j < chain; ++j) {
      check(clSetKernelArg(kernel, 0, sizeof(cl_mem), &in[(unsigned)(call * chain + j + 64) % 8]), "clSetKernelArg");
      check(clSetKernelArg(kernel, 1, sizeof(cl_mem), &out), "clSetKernelArg");
      check(clSetKernelArg(kernel, 2, sizeof per_group, &per_group), "clSetKernelArg");
      const size_t global = (size_t)groups, local = 1;
      check(clEnqueueNDRangeKernel(q, kernel, 1, NULL, &global, &local, 0, NULL, &events[j]), "clEnqueueNDRangeKernel");
    }
    if (getenv("SPIN") != NULL) {
      check(clFlush(q), "clFlush");
      cl_int status = CL_QUEUED;
      do {
        check(clGetEventInfo(events[chain - 1], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL),
              "clGetEventInfo");
      } while (status > 0);
    }
    check(clFinish(q), "clFinish");
    if (call >= 0) {
      cl_ulong first = 0, previous_end = 0;
      for (int j = 0; j < chain; ++j) {
        cl_ulong start, end;
        check(clGetEventProfilingInfo(events[j], CL_PROFILING_COMMAND_START, sizeof start, &start, NULL), "profiling");
        check(clGetEventProfilingInfo(events[j], CL_PROFILING_COMMAND_END, sizeof end, &end, NULL), "profiling");
        if (j == 0) first = start;
        else gaps[n_gaps++] = (double)(start - previous_end) * 1e-3;
        durations[n_durations++] = (double)(end - start) * 1e-3;
        previous_end = end;
      }
      totals[call] = (double)(previous_end - first) * 1e-3;
    }
    for (int j = 0; j < chain; ++j) clReleaseEvent(events[j]);
  }
  qsort(gaps, (size_t)n_gaps, sizeof(double), by_value);
  qsort(durations, (size_t)n_durations, sizeof(double), by_value);
  qsort(totals, (size_t)calls, sizeof(double), by_value);
  printf("%d work-groups of %.1f KB (%.2f MB), chains of %d: command %.1f us, gap %.1f us (10th-90th percentile "
         "%.1f-%.1f), chain %.1f us (medians of %d chains)\n",
         groups, per_group * 64 / 1024.0, (double)bytes / 1e6, chain, durations[n_durations / 2],
         n_gaps ? gaps[n_gaps / 2] : 0.0, n_gaps ? gaps[n_gaps / 10] : 0.0, n_gaps ? gaps[n_gaps * 9 / 10] : 0.0,
         totals[calls / 2], calls);
  return 0;
}
