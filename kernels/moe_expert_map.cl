// A routed expert id → the layer's local expert (or -1), shared by the routing kernels
// (moe_route.cl) and the split strategy, which routes inside its FC1 (moe_split.cl).
//
// Invalid ids never index memory: the pair is dropped and, where `status` is given, the smallest
// global pair index with an invalid id is recorded with atomic_min (status[0]; status[1] for an
// expert_map entry out of range, which the host already rules out). atomic_min of integers gives
// the same result in any order, so the status is deterministic too.
#ifndef FP4CL_MOE_EXPERT_MAP_CL
#define FP4CL_MOE_EXPERT_MAP_CL

// The local expert of global id `id`, -1 when it is not on this rank or invalid.
inline int moe_local_expert(int id, int num_global, __global const int* expert_map, int num_local) {
  if (id < 0 || id >= num_global) return -1;
  const int mapped = expert_map[id];
  return mapped < -1 || mapped >= num_local ? -1 : mapped;
}

// The same, recording an invalid id of pair `global_pair` in status.
inline int moe_map_expert(int id, int num_global, __global const int* expert_map, int num_local, long global_pair,
                          __global int* status) {
  if (id < 0 || id >= num_global) {
    atomic_min(&status[0], (int)global_pair);
    return -1;
  }
  const int mapped = expert_map[id];
  if (mapped < -1 || mapped >= num_local) {
    atomic_min(&status[1], (int)global_pair);
    return -1;
  }
  return mapped;
}

#endif  // FP4CL_MOE_EXPERT_MAP_CL
