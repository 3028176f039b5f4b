// The fastest an OpenCL runtime reads B bytes from device memory in one kernel, and in two kernels
// one after the other: what a decode MoE call (FC1 then FC2) could at best take on the device,
// timed as `fp4cl-bench` times a call (event profiling, from the first command's start to the last
// one's end, clFinish after each call). And the two reads in one kernel whose second work-groups
// wait for the first's (`phases`): what an FC1 + FC2 of one launch could take.
//
// The kernel is a plain streaming read (16-byte loads, a grid-stride loop unrolled 4 times, an XOR
// of everything read, stored only if it matches an impossible value). Each size is run in
// work-groups of 256 over 132 · {1, 2, 4, 8, 16, 32} work-groups (never more work-items than
// 16-byte words) and the best median is printed. Successive calls read successive regions of a
// 1 GiB buffer (the device's largest allocation if smaller; sizes it does not hold twice are
// skipped), so every read comes from DRAM and not from the last call's lines in L2.
//
//   cc -O2 bench/standalone/launch_floor.c -o launch_floor -lOpenCL
//   ./launch_floor [COPY_GBPS=2970] [CALLS=100]
// COPY_GBPS: the copy bandwidth to compare with (bench/gpu/run-h100.sh measures it); each row
// prints its fraction of it. The first GPU device if there is one, else the first device
// (fp4cl-independent: no fp4cl code).
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>

static const char* source =
    "__kernel void stream(__global const uint4* in, ulong n, __global uint* out) {\n"
    "  const size_t stride = get_global_size(0);\n"
    "  uint4 a = 0, b = 0, c = 0, d = 0;\n"
    "  size_t i = get_global_id(0);\n"
    "  for (; i + 3 * stride < n; i += 4 * stride) {\n"
    "    a ^= in[i]; b ^= in[i + stride]; c ^= in[i + 2 * stride]; d ^= in[i + 3 * stride];\n"
    "  }\n"
    "  for (; i < n; i += stride) a ^= in[i];\n"
    "  a ^= b ^ c ^ d;\n"
    "  if (a.x == 0x9E3779B9u && a.y == 0x7F4A7C15u) out[0] = a.z;\n"
    "}\n"
    // Two reads in one kernel: a work-group's role is its ticket (taken in the order work-groups
    // start, so a waiting one never holds a place a first-phase one needs). Tickets below g1 read
    // `first` and count themselves done; the rest load `ahead` words a work-item of `second`, wait
    // for that count, then read the rest. The last work-group to finish zeroes the counters.
    "__kernel void phases(__global const uint4* first, ulong n1, __global const uint4* second, ulong n2,\n"
    "                     uint g1, uint ahead, __global volatile uint* ctr, __global uint* out) {\n"
    "  __local uint ticket;\n"
    "  const size_t lid = get_local_id(0), wg = get_local_size(0);\n"
    "  if (lid == 0) ticket = atomic_inc(&ctr[0]);\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  const uint t = ticket;\n"
    "  uint4 a = 0, b = 0, c = 0, d = 0;\n"
    "  if (t < g1) {\n"
    "    const size_t stride = (size_t)g1 * wg;\n"
    "    size_t i = t * wg + lid;\n"
    "    for (; i + 3 * stride < n1; i += 4 * stride) {\n"
    "      a ^= first[i]; b ^= first[i + stride]; c ^= first[i + 2 * stride]; d ^= first[i + 3 * stride];\n"
    "    }\n"
    "    for (; i < n1; i += stride) a ^= first[i];\n"
    "    barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "    if (lid == 0) { mem_fence(CLK_GLOBAL_MEM_FENCE); atomic_inc(&ctr[1]); }\n"
    "  } else {\n"
    "    const size_t stride = (size_t)(get_num_groups(0) - g1) * wg;\n"
    "    size_t i = (t - g1) * wg + lid;\n"
    "    if (ahead && i + 3 * stride < n2) {\n"
    "      a = second[i]; b = second[i + stride]; c = second[i + 2 * stride]; d = second[i + 3 * stride];\n"
    "      i += 4 * stride;\n"
    "    }\n"
    "    if (lid == 0) while (atomic_add(&ctr[1], 0u) < g1) {}\n"
    "    barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "    for (; i + 3 * stride < n2; i += 4 * stride) {\n"
    "      a ^= second[i]; b ^= second[i + stride]; c ^= second[i + 2 * stride]; d ^= second[i + 3 * stride];\n"
    "    }\n"
    "    for (; i < n2; i += stride) a ^= second[i];\n"
    "  }\n"
    "  a ^= b ^ c ^ d;\n"
    "  if (a.x == 0x9E3779B9u && a.y == 0x7F4A7C15u) out[0] = a.z;\n"
    "  barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "  if (lid == 0 && atomic_inc(&ctr[2]) == get_num_groups(0) - 1) { ctr[0] = 0; ctr[1] = 0; ctr[2] = 0; }\n"
    "}\n";

static size_t kRing = (size_t)1 << 30;  // bytes read in turn: 1 GiB, or the largest allocation if smaller
static const size_t kLocal = 256;

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void check(cl_int err, const char* what) {
  if (err != CL_SUCCESS) {
    fprintf(stderr, "launch_floor: %s failed: %d\n", what, err);
    exit(1);
  }
}

typedef struct {
  cl_command_queue q;
  cl_kernel kernel, phases;
  cl_mem ring, out, counters;
  size_t offset;  // the next region's start in the ring
  int calls;
} Bench;

// The ring's next region of `bytes` (released by the caller once enqueued).
static cl_mem next_region(Bench* b, size_t bytes) {
  const size_t step = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
  if (b->offset + step > kRing) b->offset = 0;
  cl_buffer_region region = {b->offset, bytes > 0 ? bytes : 16};
  cl_int err;
  cl_mem sub = clCreateSubBuffer(b->ring, CL_MEM_READ_ONLY, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  check(err, "clCreateSubBuffer");
  b->offset += step > 0 ? step : ((size_t)1 << 20);
  return sub;
}

// Enqueues one `phases` kernel: bytes[0] by groups[0] work-groups, then bytes[1] by groups[1]
// (each loading `ahead` words before it waits when ahead is 1).
static void enqueue_phases(Bench* b, const size_t* bytes, const size_t* groups, cl_uint ahead, cl_event* event) {
  cl_mem first = next_region(b, bytes[0]), second = next_region(b, bytes[1]);
  const cl_ulong n1 = bytes[0] / 16, n2 = bytes[1] / 16;
  const cl_uint g1 = (cl_uint)groups[0];
  check(clSetKernelArg(b->phases, 0, sizeof(cl_mem), &first), "clSetKernelArg");
  check(clSetKernelArg(b->phases, 1, sizeof n1, &n1), "clSetKernelArg");
  check(clSetKernelArg(b->phases, 2, sizeof(cl_mem), &second), "clSetKernelArg");
  check(clSetKernelArg(b->phases, 3, sizeof n2, &n2), "clSetKernelArg");
  check(clSetKernelArg(b->phases, 4, sizeof g1, &g1), "clSetKernelArg");
  check(clSetKernelArg(b->phases, 5, sizeof ahead, &ahead), "clSetKernelArg");
  check(clSetKernelArg(b->phases, 6, sizeof(cl_mem), &b->counters), "clSetKernelArg");
  check(clSetKernelArg(b->phases, 7, sizeof(cl_mem), &b->out), "clSetKernelArg");
  const size_t global = (groups[0] + groups[1]) * kLocal;
  check(clEnqueueNDRangeKernel(b->q, b->phases, 1, NULL, &global, &kLocal, 0, NULL, event), "clEnqueueNDRangeKernel");
  clReleaseMemObject(first);
  clReleaseMemObject(second);
}

// Enqueues one read of `bytes` from the ring's next region with `groups` work-groups.
static void enqueue_read(Bench* b, size_t bytes, size_t groups, cl_event* event) {
  cl_mem sub = next_region(b, bytes);
  const cl_ulong n = bytes / 16;
  check(clSetKernelArg(b->kernel, 0, sizeof(cl_mem), &sub), "clSetKernelArg");
  check(clSetKernelArg(b->kernel, 1, sizeof n, &n), "clSetKernelArg");
  check(clSetKernelArg(b->kernel, 2, sizeof(cl_mem), &b->out), "clSetKernelArg");
  const size_t global = groups * kLocal;
  check(clEnqueueNDRangeKernel(b->q, b->kernel, 1, NULL, &global, &kLocal, 0, NULL, event), "clEnqueueNDRangeKernel");
  clReleaseMemObject(sub);  // released once the kernel is done with it
}

static double micros(cl_event e, cl_profiling_info what) {
  cl_ulong t;
  check(clGetEventProfilingInfo(e, what, sizeof t, &t, NULL), "clGetEventProfilingInfo");
  return (double)t * 1e-3;
}

// The median µs (first start to last end) of calls reading bytes[0] then bytes[1] (count 1 or 2
// kernels; 3 or 4: one `phases` kernel, without or with words loaded before the wait) with
// groups[0] and groups[1] work-groups; *min_us the fastest call, *gap_us the median gap.
static double time_calls(Bench* b, const size_t* bytes, const size_t* groups, int count, double* min_us,
                         double* gap_us) {
  double* totals = malloc(sizeof(double) * (size_t)b->calls);
  double* gaps = malloc(sizeof(double) * (size_t)b->calls);
  for (int call = -3; call < b->calls; ++call) {  // 3 warm-up calls
    cl_event ev[2];
    int launches = count;
    if (count > 2) {  // one `phases` kernel (3: nothing loaded before the wait, 4: a word a load)
      enqueue_phases(b, bytes, groups, count == 4, &ev[0]);
      launches = 1;
    } else {
      for (int j = 0; j < count; ++j) enqueue_read(b, bytes[j], groups[j], &ev[j]);
    }
    check(clFinish(b->q), "clFinish");
    if (call >= 0) {
      totals[call] = micros(ev[launches - 1], CL_PROFILING_COMMAND_END) - micros(ev[0], CL_PROFILING_COMMAND_START);
      gaps[call] = launches == 2 ? micros(ev[1], CL_PROFILING_COMMAND_START) - micros(ev[0], CL_PROFILING_COMMAND_END) : 0;
    }
    for (int j = 0; j < launches; ++j) clReleaseEvent(ev[j]);
  }
  qsort(totals, (size_t)b->calls, sizeof(double), by_value);
  qsort(gaps, (size_t)b->calls, sizeof(double), by_value);
  const double median = totals[b->calls / 2];
  *min_us = totals[0];
  *gap_us = gaps[b->calls / 2];
  free(totals);
  free(gaps);
  return median;
}

// The work-group counts tried for a read of `bytes`: 132 · 2^i, at most one 16-byte word a
// work-item; at least one work-group.
static int group_counts(size_t bytes, size_t* out) {
  int n = 0;
  for (size_t g = 132; g <= 132 * 32; g *= 2)
    if (g * kLocal <= bytes / 16 || n == 0) out[n++] = g;
  return n;
}

int main(int argc, char** argv) {
  const double copy_gbps = argc > 1 ? atof(argv[1]) : 2970.0;
  Bench b = {0};
  b.calls = argc > 2 ? atoi(argv[2]) : 100;
  if (copy_gbps <= 0 || b.calls < 1) return 2;
  cl_int err;
  cl_platform_id platform;
  cl_device_id device;
  check(clGetPlatformIDs(1, &platform, NULL), "clGetPlatformIDs");
  if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_GPU, 1, &device, NULL) != CL_SUCCESS)
    check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL), "clGetDeviceIDs");
  char name[256];
  check(clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name, name, NULL), "clGetDeviceInfo");
  cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
  check(err, "clCreateContext");
  b.q = clCreateCommandQueue(ctx, device, CL_QUEUE_PROFILING_ENABLE, &err);
  check(err, "clCreateCommandQueue");
  cl_program program = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
  check(err, "clCreateProgramWithSource");
  if (clBuildProgram(program, 1, &device, "", NULL, NULL) != CL_SUCCESS) {
    static char log[16384];
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fprintf(stderr, "launch_floor: clBuildProgram failed:\n%s\n", log);
    return 1;
  }
  b.kernel = clCreateKernel(program, "stream", &err);
  check(err, "clCreateKernel");
  b.phases = clCreateKernel(program, "phases", &err);
  check(err, "clCreateKernel");
  cl_ulong max_alloc = 0;
  check(clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL), "clGetDeviceInfo");
  if (max_alloc < kRing) kRing = (size_t)max_alloc & ~(((size_t)1 << 20) - 1);
  b.ring = clCreateBuffer(ctx, CL_MEM_READ_ONLY, kRing, NULL, &err);
  check(err, "clCreateBuffer");
  const cl_uint zero = 0;
  check(clEnqueueFillBuffer(b.q, b.ring, &zero, sizeof zero, 0, kRing, 0, NULL, NULL), "clEnqueueFillBuffer");
  b.out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4, NULL, &err);
  check(err, "clCreateBuffer");
  b.counters = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 3 * sizeof(cl_uint), NULL, &err);
  check(err, "clCreateBuffer");
  check(clEnqueueFillBuffer(b.q, b.counters, &zero, sizeof zero, 0, 3 * sizeof(cl_uint), 0, NULL, NULL),
        "clEnqueueFillBuffer");
  check(clFinish(b.q), "clFinish");
  printf("%s, copy bandwidth %.0f GB/s, medians of %d calls (event profiling, clFinish after each)\n", name, copy_gbps,
         b.calls);

  // One kernel: an empty read, small sizes, the qwen3-30b-a3b decode sizes (FC2, FC1 and both at
  // T = 1, both at T = 8), and large reads.
  const size_t one[] = {0,         1u << 20,  1u << 22,  7077888,   14155776,
                        21233664,  1u << 26,  138018816, 1u << 28};
  printf("\none kernel\n%12s %9s %10s %8s %9s %9s %14s\n", "bytes", "groups", "median us", "min us", "GB/s",
         "% copy", "us at 60 %");
  for (size_t s = 0; s < sizeof one / sizeof one[0]; ++s) {
    if (2 * one[s] > kRing) {
      printf("%12zu   skipped: the largest allocation (%zu bytes) does not hold it twice\n", one[s], kRing);
      continue;
    }
    size_t counts[8];
    const int n = group_counts(one[s], counts);
    double best = 1e30, best_min = 0, gap;
    size_t best_groups = 0;
    for (int c = 0; c < n; ++c) {
      double mn;
      const double med = time_calls(&b, &one[s], &counts[c], 1, &mn, &gap);
      if (med < best) best = med, best_min = mn, best_groups = counts[c];
    }
    const double gbps = (double)one[s] / best * 1e-3;
    printf("%12zu %9zu %10.2f %8.2f %9.0f %8.1f%% %14.2f\n", one[s], best_groups, best, best_min, gbps,
           100.0 * gbps / copy_gbps, (double)one[s] / (0.6 * copy_gbps) * 1e-3);
  }

  // Two reads (FC1 then FC2 at T = 1 and 8 of qwen3-30b-a3b, T = 1 of mixtral-8x7b): two kernels,
  // the second after the first on the in-order queue; or one `phases` kernel whose second
  // work-groups wait for the first's count, loading nothing or a word a load before they wait.
  const size_t two[][2] = {{14155776, 7077888}, {92012544, 46006272}, {132120576, 66060288}};
  static const char* const how[] = {"", "", "2 kernels", "1, waits", "1, loads+waits"};
  printf("\ntwo reads\n%22s %-15s %13s %10s %8s %8s %9s %8s %14s\n", "bytes", "how", "groups", "median us", "min us",
         "gap us", "GB/s", "% copy", "us at 60 %");
  for (size_t s = 0; s < sizeof two / sizeof two[0]; ++s) {
    if (2 * (two[s][0] + two[s][1]) > kRing) {
      printf("%10zu+%-11zu   skipped: the largest allocation (%zu bytes) does not hold it twice\n", two[s][0], two[s][1],
             kRing);
      continue;
    }
    size_t c0[8], c1[8];
    const int n0 = group_counts(two[s][0], c0), n1 = group_counts(two[s][1], c1);
    for (int mode = 2; mode <= 4; ++mode) {
      double best = 1e30, best_min = 0, best_gap = 0;
      size_t best_groups[2] = {0, 0};
      for (int i = 0; i < n0; ++i)
        for (int j = 0; j < n1; ++j) {
          const size_t groups[2] = {c0[i], c1[j]};
          double mn, gap;
          const double med = time_calls(&b, two[s], groups, mode, &mn, &gap);
          if (med < best) best = med, best_min = mn, best_gap = gap, best_groups[0] = c0[i], best_groups[1] = c1[j];
        }
      const size_t total = two[s][0] + two[s][1];
      const double gbps = (double)total / best * 1e-3;
      printf("%10zu+%-11zu %-15s %6zu+%-6zu %10.2f %8.2f %8.2f %9.0f %7.1f%% %14.2f\n", two[s][0], two[s][1], how[mode],
             best_groups[0], best_groups[1], best, best_min, best_gap, gbps, 100.0 * gbps / copy_gbps,
             (double)total / (0.6 * copy_gbps) * 1e-3);
    }
  }
  return 0;
}
