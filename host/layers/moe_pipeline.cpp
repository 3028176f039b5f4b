#include "layers/moe_pipeline.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "cl/kernel_limits.hpp"
#include "cl/opencl_calls.hpp"
#include "kernels/moe_build_options.hpp"
#include "support/check.hpp"
#include "support/log.hpp"

namespace fp4cl {

namespace {

std::size_t round_up(std::int64_t n, std::int64_t m) { return static_cast<std::size_t>((n + m - 1) / m * m); }

template <typename... Args>
void set_args(cl::Kernel& kernel, const char* name, const Args&... args) {
  cl_uint index = 0;
  ((check_cl(kernel.setArg(index, args), "setting argument {} of {}", index, name), ++index), ...);
}

cl_int as_int(std::int64_t v) { return static_cast<cl_int>(v); }

// "51840 × 4" for a launch's message; "the driver's choice" for cl::NullRange.
std::string describe(const cl::NDRange& r) {
  if (r.dimensions() == 0) return "the driver's choice";
  std::string s = std::to_string(r[0]);
  for (cl_uint i = 1; i < r.dimensions(); ++i) s += " × " + std::to_string(r[i]);
  return s;
}

// The product of a range's dimensions; 0 for the null range (the driver's choice).
std::uint64_t volume(const cl::NDRange& r) {
  if (r.dimensions() == 0) return 0;
  std::uint64_t n = 1;
  for (cl_uint i = 0; i < r.dimensions(); ++i) n *= r[i];
  return n;
}

cl::Buffer device_buffer(const Context& ctx, const char* what, std::int64_t bytes) {
  return allocate_buffer(ctx, CL_MEM_READ_WRITE, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 4)), nullptr,
                         fmt::format("MoE: the workspace buffer {}", what));
}

}  // namespace

std::int64_t moe_max_tiles(std::int64_t pairs, std::int64_t experts, int tile_m) {
  // Σ_e ceil(c_e / m) <= (Σ c_e + (m - 1) · #non-empty experts) / m.
  return (pairs + std::min(experts, pairs) * (tile_m - 1)) / tile_m;
}

MoeWorkspace allocate_moe_workspace(const Context& ctx, const MoeShape& shape, const MoeSelection& selection,
                                    std::int64_t max_tokens, int x_form_bytes, bool bf16_pairs) {
  // y [pairs, H]: the per-pair FC2 outputs that moe_reduce sums (grouped and mma).
  const bool grouped = selection.uses(MoeStrategy::grouped) || selection.uses(MoeStrategy::mma);
  // The BF16 pairs of x1 and x2 (x1q, x2q): for grouped and decode with the BF16 dot products;
  // or, in the same buffers, their integer form for the integer dot products (W4A4: 1.5 bytes an
  // element of the 2 allocated; W4A16's planes up to 3; kernels/moe_int_dot.cl, MOE_INTDOT), or the
  // scaled activations (kernels/moe_scaled_x.cl: 4.5 bytes an element): x_form_bytes per two.
  const bool packed = (bf16_pairs || x_form_bytes > 0) &&
                      (selection.uses(MoeStrategy::grouped) || selection.uses(MoeStrategy::decode));
  const auto max_alloc = static_cast<std::int64_t>(max_alloc_bytes(ctx));
  const std::int64_t per_pair = 4 * std::max(shape.hidden, shape.intermediate);  // the largest activation row
  const std::int64_t fit = std::max<std::int64_t>(1, max_alloc / per_pair / shape.top_k);
  MoeWorkspace ws;
  ws.max_tokens = std::min(max_tokens, fit);
  if (ws.max_tokens < max_tokens)
    log::info("MoE: workspace capacity lowered from {} to {} tokens (largest allocation {} bytes)", max_tokens,
              ws.max_tokens, max_alloc);
  ws.max_pairs = ws.max_tokens * shape.top_k;
  for (const auto& e : selection.usable) {
    // mma runs chunks of few pairs with tiles of 8 (mma_few_pairs_tiles).
    const int tile_m = e.id == MoeStrategy::mma ? std::min(8, e.tiles.tile_m) : e.tiles.tile_m;
    ws.max_tiles = std::max(ws.max_tiles, moe_max_tiles(ws.max_pairs, shape.local_experts, tile_m));
  }
  const std::int64_t P = ws.max_pairs;
  const std::int64_t packed_bytes = x_form_bytes > 0 ? x_form_bytes : 4;  // per 2 elements
  const std::int64_t total = 16 * P + 12 * ws.max_tiles + 24 + 4 * (shape.hidden / 16 + 1) + 4 * P * shape.hidden +
                             4 * P * shape.intermediate + (grouped ? 4 * P * shape.hidden : 0) +
                             (packed ? packed_bytes * P * (shape.hidden + shape.intermediate) / 2 : 0);
  // The weights and the caller's buffers need room too: a workspace may take half the memory.
  if (static_cast<std::uint64_t>(total) > ctx.info().global_mem_bytes / 2)
    fail("MoE: max_tokens = {} needs a workspace of {} bytes (for {} tokens a chunk); {} has {} bytes of memory in "
         "all, and a workspace may take at most half (lower MoeConfig::max_tokens: larger batches run in chunks)",
         max_tokens, total, ws.max_tokens, ctx.info().name, ctx.info().global_mem_bytes);
  ws.pair_expert = device_buffer(ctx, "pair_expert", 4 * P);
  ws.pair_weight = device_buffer(ctx, "pair_weight", 4 * P);
  ws.pair_slot = device_buffer(ctx, "pair_slot", 4 * P);
  ws.slot_pair = device_buffer(ctx, "slot_pair", 4 * P);
  ws.tiles = device_buffer(ctx, "tiles", 12 * ws.max_tiles);
  ws.chunk_info = device_buffer(ctx, "chunk_info", 8);
  ws.status = device_buffer(ctx, "status", 16);
  ws.row_blocks_done = device_buffer(ctx, "row_blocks_done", 4 * (shape.hidden / 16 + 1));
  // x1, x2: fp32 rows, or BF16 rows in the same buffers for mma (moe_mma.cl).
  ws.x1 = device_buffer(ctx, "x1 (FC1 inputs)", 4 * P * shape.hidden);
  ws.x2 = device_buffer(ctx, "x2 (FC2 inputs)", 4 * P * shape.intermediate);
  if (grouped) ws.y = device_buffer(ctx, "y (expert outputs)", 4 * P * shape.hidden);
  if (packed) {
    ws.x1q = device_buffer(ctx, "x1q (FC1 inputs packed)", packed_bytes * P * shape.hidden / 2);
    ws.x2q = device_buffer(ctx, "x2q (FC2 inputs packed)", packed_bytes * P * shape.intermediate / 2);
  }
  return ws;
}

void moe_launch(const cl::CommandQueue& queue, cl::Kernel& kernel, const char* name, const cl::NDRange& global,
                const cl::NDRange& local, const MoeChunk& c, bool chunk_end, std::vector<MoeLaunch>& launches,
                cl::Event& last) {
  const bool event = c.every_event || chunk_end || (c.first_event && launches.empty());
  // fp4cl's queues are in order (Context refuses others), so each kernel already runs after
  // `last`; an explicit wait list would only cost time (NVIDIA's OpenCL adds ~10 µs a launch).
  cl::Event e;
  if (const cl_int err = opencl::enqueue_kernel(queue, kernel, global, local, nullptr, event ? &e : nullptr);
      err != CL_SUCCESS)
    check_cl(err, "enqueueing the MoE kernel {} ({} work-items in work-groups of {}; {})", name, describe(global),
             describe(local), describe_kernel_limits(kernel, queue.getInfo<CL_QUEUE_DEVICE>()));
  launches.push_back({name, e, volume(global), volume(local)});
  if (event) last = e;
}

MoeRouter::MoeRouter(const Context& ctx, const MoeShape& shape, const MoeLogitRouting& r, MoeSoftmaxRouter softmax)
    : topk_(ctx.programs().kernel("moe_route.cl", "moe_route_topk")) {
  if (!r.unsupported.empty()) return;  // logit calls fail, naming why
  // Plain softmax top-k on a CPU: one work-item a token (moe_route_logits: k passes over the
  // logits, no barriers). The work-group kernel's rank loop and reduction trees cost PoCL twice
  // its time (E = 256, k = 8, T = 512: 3257 against 1569–1598 µs on a 2-core EPYC), while on an
  // H200 one work-item a token took 54 µs at T = 1 against the work-group's 8 (2026-12-05).
  if (softmax == MoeSoftmaxRouter::automatic)
    softmax = ctx.info().kind == DeviceKind::cpu ? MoeSoftmaxRouter::work_item : MoeSoftmaxRouter::work_group;
  if (r.plain_softmax() && softmax == MoeSoftmaxRouter::work_item) {
    logits_ = ctx.programs().kernel("moe_route.cl", "moe_route_logits");
    return;
  }
  // A work-group a token of moe_route_build's ROUTE_LOCAL work-items (a power of two: the softmax
  // sums' tree), as the FC1 that routes logits itself (MMA_ROUTE_LOGITS) computes them.
  const MoeRouteBuild build = moe_route_build(ctx.info(), shape.global_experts, shape.routed_k, shape.top_k, r);
  const std::size_t local = build.local;
  if (local < static_cast<std::size_t>(shape.top_k))
    fail("MoE: the logit router writes a token's {} pairs with as many work-items, but {} allows {}", shape.top_k,
         ctx.info().name, local);
  grouped_local_ = local;
  BuildOptions o;
  build.define(o);
  o.define("ROUTE_PAIRS", shape.top_k).define("ROUTE_SHARED_FIRST", shape.shared_first());
  grouped_ = ctx.programs().kernel("moe_route_grouped.cl", "moe_route_grouped", o);
  const std::vector<float> bias = r.correction_bias.empty() ? std::vector<float>{0.0f} : r.correction_bias;
  bias_ = allocate_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bias.size() * sizeof(float), bias.data(),
                          "MoE: the router's correction bias");
  scaling_ = r.scaling_factor;
}

void MoeRouter::enqueue(const cl::CommandQueue& queue, const MoeShape& s, const MoeDeviceWeights& w,
                        const MoeWorkspace& ws, const MoeChunk& c, std::vector<MoeLaunch>& launches, cl::Event& last) {
  const cl_int T = as_int(c.tokens), offset = as_int(c.token_offset), k = s.routed_k, pairs = s.top_k;
  const cl_int shared_first = as_int(s.shared_first());
  const cl_int E_global = as_int(s.global_experts), E_local = as_int(s.local_experts);
  const cl::NDRange global(static_cast<std::size_t>(c.tokens));
  if (c.routing.logits && logits_()) {
    set_args(logits_, "moe_route_logits", *c.routing.logits, T, offset, k, cl_int{c.routing.renormalize ? 1 : 0},
             E_global, w.expert_map, E_local, ws.pair_expert, ws.pair_weight, ws.status, pairs, shared_first);
    moe_launch(queue, logits_, "moe_route_logits", global, cl::NullRange, c, false, launches, last);
  } else if (c.routing.logits) {
    if (!grouped_()) fail("MoE: router logits on a layer whose routing fp4cl does not compute");  // checked before
    set_args(grouped_, "moe_route_grouped", *c.routing.logits, T, offset, cl_int{c.routing.renormalize ? 1 : 0},
             scaling_, bias_, w.expert_map, E_local, ws.pair_expert, ws.pair_weight, ws.status);
    moe_launch(queue, grouped_, "moe_route_grouped", cl::NDRange(static_cast<std::size_t>(c.tokens) * grouped_local_),
               cl::NDRange(grouped_local_), c, false, launches, last);
  } else {
    set_args(topk_, "moe_route_topk", *c.routing.topk_ids, *c.routing.topk_weights, T, offset, k, E_global,
             w.expert_map, E_local, ws.pair_expert, ws.pair_weight, ws.status, pairs, shared_first);
    moe_launch(queue, topk_, "moe_route_topk", global, cl::NullRange, c, false, launches, last);
  }
}

MoeStrategyKernels::MoeStrategyKernels(const Context& ctx, const MoeSelection::Entry& entry,
                                       const MoeLayout& layout, const MoeProgramOptions& o, const MoeProblem& problem)
    : id_(entry.id), tiles_(entry.tiles), layout_(layout), experts_(problem.local_experts) {
  // MOE_BATCH_INVARIANT for the files of the other strategies (moe_fc1.cl, moe_fc2.cl and their
  // moe_fp4_vec.cl's 16-lane paths); moe_mma.cl reads it nowhere, so its programs are shared with
  // layers that do not ask for batch invariance.
  BuildOptions numerics = o.numerics;
  if (o.batch_invariant) numerics.define("MOE_BATCH_INVARIANT");
  if (id_ == MoeStrategy::split) {
    split_ = split_geometry(tiles_, problem);
    BuildOptions b = numerics;
    if (o.scheme.weight == WeightFormat::nvfp4) b.define("MOE_NVFP4");
    b.define("MOE_W4A4", o.scheme.w4a16() ? 0 : 1);
    BuildOptions fc1 = b, fc2 = b;  // the output type only for FC2, which writes the output
    fc2.define("MOE_OUT_BF16", o.output == MoeOutput::bf16 ? 1 : 0);
    fc1.define("SPLIT_LANES1", split_.lanes1)
        .define("SPLIT_LOCAL1", split_.local1)
        .define("SPLIT_RPG", split_.rows_per_group)
        .define("SPLIT_HIDDEN", static_cast<int>(problem.hidden));
    fc2.define("SPLIT_LANES2", split_.lanes2).define("SPLIT_SLOTS", split_.slots).define("SPLIT_ROWS2", split_.rows2);
    fc1_ = ctx.programs().kernel("moe_split.cl", "moe_split_fc1", fc1);
    fc2_ = ctx.programs().kernel("moe_split.cl", "moe_split_fc2", fc2);
    shared_pairs_ = split_shared_pairs(split_, problem, ctx.info().local_mem_bytes);
    if (shared_pairs_ > 1) {
      fc1.define("SPLIT_PAIRS", shared_pairs_);
      fc1_shared_ = ctx.programs().kernel("moe_split.cl", "moe_split_fc1", fc1);
    }
    return;
  }
  if (id_ == MoeStrategy::mma) {
    few_tiles_ = mma_few_pairs_tiles(tiles_, problem);
    mma_direct_ = o.scheme.w4a16();
    few_ = mma_geometry(few_tiles_, problem);
    // One token: its own K split (mma_few_pairs_tiles), but few_'s where chunks must give the same
    // sums as any other (batch invariance).
    pair_ = o.batch_invariant ? few_ : mma_geometry(mma_few_pairs_tiles(tiles_, problem, true), problem);
    // Batch invariance: the same K split (the same sums in the same order) for every chunk.
    mma_ = o.batch_invariant ? mma_geometry(tiles_, problem, few_.fc1.ks, few_.fc2.ks) : mma_geometry(tiles_, problem);
  }
  // Each file gets only the defines it reads, so layers share programs where they can.
  BuildOptions format = numerics;
  if (o.scheme.weight == WeightFormat::nvfp4) format.define("MOE_NVFP4");
  BuildOptions dispatch = format;
  dispatch.define("MOE_W4A4", o.scheme.w4a16() ? 0 : 1);
  format.define("MOE_VEC", layout_.vec).define("MOE_GROUP", layout_.group).define("MOE_TILE_M", tiles_.tile_m);
  BuildOptions fc1 = format, fc2 = format;
  fc1.define("MOE_W4A4", o.scheme.w4a16() ? 0 : 1).define("MOE_LOCAL", tiles_.local_i);
  fc2.define("MOE_OUT_BF16", o.output == MoeOutput::bf16 ? 1 : 0).define("MOE_LOCAL", tiles_.local_h);
  // NVFP4 W4A4: FC2's inputs are quantized values, never tiny (no scan before its BF16 dot products).
  if (o.scheme.weight == WeightFormat::nvfp4 && !o.scheme.w4a16()) fc2.define("MOE_X2_FP4");
  ProgramCache& programs = ctx.programs();
  sort_ = programs.kernel("moe_dispatch.cl", "moe_sort", dispatch);
  gather_ = programs.kernel("moe_dispatch.cl", "moe_gather", dispatch);
  if (id_ == MoeStrategy::mma && !o.scheme.w4a16())
    gather_pairs_ = programs.kernel("moe_dispatch.cl", "moe_gather_pairs", dispatch);
  if (id_ == MoeStrategy::mma) {
    BuildOptions mma = o.numerics;
    if (o.scheme.weight == WeightFormat::nvfp4) mma.define("MOE_NVFP4");
    mma.define("MOE_W4A4", o.scheme.w4a16() ? 0 : 1)
        .define("FP4_MMA_PTX", mma_native(ctx.info()) ? 1 : 0);
    // few: chunks of few pairs, whose FC2 sums the top-k itself (MMA_SUM); per_pair: one token's
    // pairs each a tile of their own, no moe_sort (MMA_PER_PAIR).
    const auto build = [&](const MmaGeometry& g, const char* name, const MmaGemm& gemm, const char* which, bool few,
                           bool per_pair = false, bool routed = false, int row_loop = 1, bool token_sum = false,
                           bool route_logits = false) {
      BuildOptions b = mma;
      if (route_logits) {  // FC1 routes router logits itself, as the router kernel does (moe_route_token.cl)
        o.route->define(b);
        b.define("MMA_ROUTE_LOGITS", 1);
      }
      b.define(which)
          .define("MMA_NT", g.nt)
          .define("MMA_RT", gemm.rt)
          .define("MMA_KSPLIT", gemm.ks)
          .define("MMA_KSTAGE", gemm.kstage)
          .define("MMA_STAGE", gemm.stage ? 1 : 0)
          .define("MMA_UNROLL", &gemm == &g.fc2 ? g.fc2_unroll : g.unroll);
      if (gemm.mt > 1) b.define("MMA_MT", gemm.mt);  // programs of one row tile a warp keep their options
      // W4A16: FC1 reads the caller's BF16 rows in place (no moe_gather).
      if (&gemm == &g.fc1 && mma_direct_) b.define("MMA_DIRECT", 1);
      // The output type only where FC2 writes the output (MMA_SUM), and H only where FC1 quantizes
      // the token into local memory (MMA_PER_PAIR under W4A4): layers of other output types and
      // shapes share the other programs.
      if (&gemm == &g.fc2) {
        b.define("MMA_SUM", few ? 1 : 0);
        if (few) b.define("MOE_OUT_BF16", o.output == MoeOutput::bf16 ? 1 : 0);
      }
      if (token_sum) b.define("MMA_TOKEN_SUM", 1).define("MMA_TOPK", static_cast<int>(problem.top_k));
      if (per_pair) b.define("MMA_PER_PAIR", 1);
      if ((per_pair || (routed && routed_local_tile_ > 0)) && &gemm == &g.fc1 && !o.scheme.w4a16())
        b.define("MMA_HIDDEN", static_cast<int>(problem.hidden));
      if (&gemm == &g.fc1 && row_loop > 1) b.define("MMA_ROW_LOOP", row_loop);
      if (routed) b.define("MMA_ROUTED", 1);
      if (routed && &gemm == &g.fc1 && routed_local_tile_ > 0) b.define("MMA_ROUTE_TILE", routed_local_tile_);
      return programs.kernel("moe_mma.cl", name, b);
    };
    fc1_ = build(mma_, "moe_mma_fc1", mma_.fc1, "MMA_FC1", false);
    fc2_ = build(mma_, "moe_mma_fc2", mma_.fc2, "MMA_FC2", false);
    fc1_few_ = build(few_, "moe_mma_fc1", few_.fc1, "MMA_FC1", true);
    fc2_few_ = build(few_, "moe_mma_fc2", few_.fc2, "MMA_FC2", true);
    // FC1's local arrays besides quantized tokens (partial sums or staged activations, a_local),
    // plus 1 KiB for the rest (route lists, scratch).
    const auto fc1_other_local = [](const MmaGeometry& g) {
      const MmaGemm& f = g.fc1;
      return 4 * f.shared_words(g.nt, 2) + 4u * static_cast<std::uint64_t>(8 * g.nt * f.rows()) + 1024;
    };
    const std::uint64_t local = ctx.info().local_mem_bytes;
    // Routed chunks under W4A4: FC1 quantizes its tile's tokens into local memory (no
    // moe_gather_pairs) where mma_routed_local_tile finds room for 2 tokens or more, in work-groups
    // of mma_routed_local_row_tiles row tiles, unstaged (all read the one local copy). Else the
    // few-pairs geometry.
    // MoeTiles::routed_row_tiles, where set, gives that FC1's row tiles a work-group.
    const int routed_rt = tiles_.routed_row_tiles;
    routed_ = few_;
    if (!o.scheme.w4a16()) {
      routed_.fc1.rt = routed_rt > 0 ? routed_rt
                                     : mma_routed_local_row_tiles(problem.intermediate, problem.scheme.block_size(),
                                                                  few_.fc1.rt);
      routed_.fc1.stage = false;
      const std::uint64_t other = fc1_other_local(routed_);
      if (local > other) routed_local_tile_ = mma_routed_local_tile(problem.hidden, problem.local_experts, local - other);
      if (routed_local_tile_ == 0) routed_ = few_;
    }
    if (routed_rt > 0) routed_.fc1.rt = routed_rt;
    routed_row_loop_ = std::max(1, tiles_.routed_row_loop);  // MoeTiles::routed_row_loop
    fc1_routed_ = build(routed_, "moe_mma_fc1", routed_.fc1, "MMA_FC1", true, false, true, routed_row_loop_);
    fc2_routed_ = build(routed_, "moe_mma_fc2", routed_.fc2, "MMA_FC2", true, false, true);
    // Routed chunks' FC2 as a work-group a token (MMA_TOKEN_SUM: routed_token_, routed_'s geometry
    // without a K split, or with few_'s under batch invariance, the same sums as every other
    // chunk's): built where the tiles ask for it (mma.routed_fc2 2) or mma_routed_token_fc2 would
    // take it for the smallest routed chunk (one token), and its work-group fits.
    routed_token_ = routed_;
    if (!o.batch_invariant) routed_token_.fc2.ks = 1;
    // MoeTiles::token_fc2_warp_tiles row tiles a warp: work-groups of at most 64 rows (the few-pairs
    // FC2 has one row tile a work-group), which divide H (a multiple of 64: mma_refusal).
    routed_token_.fc2.mt = std::max(1, tiles_.token_fc2_warp_tiles);
    const MmaGemm& t2 = routed_token_.fc2;
    const std::uint64_t token_threads = static_cast<std::uint64_t>(t2.local()) * problem.top_k;
    const std::uint64_t token_bytes =
        4 * (t2.shared_words(routed_token_.nt, 1) * problem.top_k + 16);  // partial sums, a flag
    const bool token_fits = routed_token_.nt == 1 && !t2.stage &&
                            token_threads <= ctx.info().max_work_group_size && token_bytes <= local;
    // Why the token FC2 does not fit the device, for the info lines below.
    const auto token_misfit = [&] {
      return fmt::format("a work-group of {} work-items and {} bytes of local memory for a token's {} pairs does not "
                         "fit {} ({} and {})",
                         token_threads, token_bytes, problem.top_k, ctx.info().name, ctx.info().max_work_group_size,
                         local);
    };
    if (tiles_.routed_fc2 == 2 && !token_fits)  // batch invariance: the tiles' K split widens it
      log::info("MoE: mma.routed_fc2 = 2, but {}: routed chunks keep a work-group a tile", token_misfit());
    if (token_fits && mma_token_fc2(problem.top_k, problem.intermediate))
      fc2_routed_token_ = build(routed_token_, "moe_mma_fc2", t2, "MMA_FC2", true, false, false, 1, true);
    if (tiles_.token_fc2_warp_tiles > 1 && fc2_routed_token_() == nullptr)
      log::info("MoE: mma.token_fc2_warp_tiles = {} changes nothing here: routed chunks keep a work-group a tile in "
                "FC2 ({})",
                tiles_.token_fc2_warp_tiles,
                !token_fits              ? token_misfit()
                : tiles_.routed_fc2 == 1 ? std::string("mma.routed_fc2 = 1")
                                         : fmt::format("{} local experts for a token's {} pairs and I = {}: "
                                                       "mma_routed_token_fc2 takes a work-group a tile",
                                                       experts_, problem.top_k, problem.intermediate));
    // That FC1 with several row tiles a warp (routed_wide_) for every routed chunk where the tiles
    // ask for it (mma.routed_warp_tiles 2 or 4; automatic: none, see mma_routed_local_row_tiles)
    // and its local memory fits beside the tile's tokens (its rows divide I: mma_tiles_refusal).
    const int wide = tiles_.routed_warp_tiles;
    if (routed_local_tile_ > 0 && wide > 1) {
      routed_wide_ = routed_;
      routed_wide_.fc1.mt = wide;
      const std::uint64_t tokens = 2u * static_cast<std::uint64_t>(problem.hidden) * routed_local_tile_;
      if (problem.intermediate % routed_wide_.fc1.rows() == 0 && fc1_other_local(routed_wide_) + tokens <= local)
        fc1_routed_wide_ = build(routed_wide_, "moe_mma_fc1", routed_wide_.fc1, "MMA_FC1", true, false, true);
    }
    // One token: FC1 routes, every pair is a tile. W4A4: every FC1 work-group quantizes the token
    // into local memory (2·H bytes of BF16 beside its partial sums), so they take up to 4 row tiles
    // (unstaged: all read the one local copy) to quantize it fewer times, the widest of
    // mma_pair_fc1_row_tiles whose local memory fits; where none fits, one-token chunks take the
    // few-pairs path.
    const std::vector<int> pair_row_tiles =
        o.scheme.w4a16() ? std::vector<int>{pair_.fc1.rt}
                         : mma_pair_fc1_row_tiles(problem, pair_.fc1.rt, pair_.fc1.ks, ctx.info().max_work_group_size);
    if (!o.scheme.w4a16()) pair_.fc1.stage = false;
    for (const int rt : pair_row_tiles) {
      pair_.fc1.rt = rt;
      mma_per_pair_ =
          o.scheme.w4a16() || 2u * static_cast<std::uint64_t>(problem.hidden) + fc1_other_local(pair_) <= local;
      if (mma_per_pair_) break;
    }
    if (!o.scheme.w4a16()) {  // FC1 quantizes the token (MMA_X_LOCAL): blocks of rows a work-group
      const std::int64_t blocks = problem.intermediate / pair_.fc1.rows();
      pair_row_loop_ = tiles_.row_loop > 0 ? static_cast<int>(largest_divisor_within(blocks, tiles_.row_loop))
                                           : mma_pair_row_loop(blocks, problem.top_k, ctx.info().compute_units);
    }
    if (mma_per_pair_) {
      fc1_pair_ = build(pair_, "moe_mma_fc1", pair_.fc1, "MMA_FC1", true, true, false, pair_row_loop_);
      fc2_pair_ = build(pair_, "moe_mma_fc2", pair_.fc2, "MMA_FC2", true, true);
    }
    reduce_ = programs.kernel("moe_fc2.cl", "moe_reduce", fc2);
    // The FC1 programs that route router logits themselves (MoeTiles::route_logits: one-token
    // chunks unless it is 1, routed chunks where it is 2 or where it is 0 and mma_fc1_routes_chunk
    // takes a chunk of 2 tokens, routes_logits), where the layer's routing is
    // moe_route_token.cl's and their local memory holds a token's routing beside the rest. Routed
    // W4A4 chunks whose FC1 reads moe_gather_pairs' rows keep the router kernel: the gather reads
    // the pairs first. They are an optimization: a build that fails leaves those calls to the
    // router kernel (a warning says why) rather than failing the layer. Built last, so that
    // tests/faults can fail every build from theirs on.
    const auto optional = [&](const char* what, auto&& make) -> cl::Kernel {
      try {
        return make();
      } catch (const Error& e) {
        log::warn("MoE: the {} FC1 that routes router logits itself did not build on {}, so the router kernel "
                  "routes those calls: {}",
                  what, ctx.info().name, e.what());
        return cl::Kernel();
      }
    };
    if (o.route && tiles_.route_logits != 1) {
      const std::uint64_t scratch = o.route->scratch_bytes();
      const std::uint64_t token = o.scheme.w4a16() ? 0 : 2u * static_cast<std::uint64_t>(problem.hidden);
      if (mma_per_pair_ && token + fc1_other_local(pair_) + scratch <= local)
        fc1_pair_logits_ = optional("one-token", [&] {
          return build(pair_, "moe_mma_fc1", pair_.fc1, "MMA_FC1", true, true, false, pair_row_loop_, false, true);
        });
      route_experts_ = o.route->experts;
      const bool routed = tiles_.route_logits == 2 || mma_fc1_routes_chunk(2, route_experts_);
      if (routed && (mma_direct_ || routed_local_tile_ > 0)) {
        const std::uint64_t tile = token * static_cast<std::uint64_t>(routed_local_tile_);  // W4A16: none
        if (fc1_other_local(routed_) + tile + scratch <= local)
          fc1_routed_logits_ = optional("routed", [&] {
            return build(routed_, "moe_mma_fc1", routed_.fc1, "MMA_FC1", true, false, true, routed_row_loop_, false,
                         true);
          });
        if (fc1_routed_wide_() != nullptr && fc1_other_local(routed_wide_) + tile + scratch <= local)
          fc1_routed_wide_logits_ = optional("routed", [&] {
            return build(routed_wide_, "moe_mma_fc1", routed_wide_.fc1, "MMA_FC1", true, false, true, 1, false, true);
          });
      }
    }
  } else if (id_ == MoeStrategy::grouped) {
    fc1_ = programs.kernel("moe_fc1.cl", "moe_fc1", fc1);
    fc2_ = programs.kernel("moe_fc2.cl", "moe_fc2", fc2);
    reduce_ = programs.kernel("moe_fc2.cl", "moe_reduce", fc2);
  } else {
    fc1_ = programs.kernel("moe_fc1.cl", "moe_fc1", fc1);
    fc2_ = programs.kernel("moe_fc2.cl", "moe_fc2_reduce", fc2);
  }
  std::size_t limit = 0;
  check_cl(sort_.getWorkGroupInfo(ctx.device(), CL_KERNEL_WORK_GROUP_SIZE, &limit),
           "querying the work-group size of moe_sort");
  sort_local_limit_ = std::max<std::size_t>(1, std::min<std::size_t>(limit, 256));
  // moe_sort keeps three ints per local expert and a block of 2048 pairs in local memory.
  if (12 * static_cast<std::uint64_t>(experts_) + 4 * 2048 > ctx.info().local_mem_bytes)
    fail("MoE: {} local experts need {} bytes of local memory for moe_sort (three ints an expert and 8192 bytes of "
         "pairs); {} has {}",
         experts_, 12 * experts_ + 4 * 2048, ctx.info().name, ctx.info().local_mem_bytes);
}

bool MoeStrategyKernels::mma_few_pairs(std::int64_t pairs) const {
  return mma_few_pairs_chunk(pairs, experts_, tiles_.tile_m);
}

bool MoeStrategyKernels::mma_token_fc2(std::int64_t pairs, std::int64_t intermediate) const {
  return tiles_.routed_fc2 == 2 || (tiles_.routed_fc2 == 0 && mma_routed_token_fc2(pairs, experts_, intermediate));
}

bool MoeStrategyKernels::mma_per_pair(std::int64_t tokens) const { return mma_per_pair_ && tokens == 1; }

bool MoeStrategyKernels::routes_logits(std::int64_t tokens, int top_k) const {
  if (id_ != MoeStrategy::mma) return false;
  if (mma_per_pair(tokens)) return fc1_pair_logits_() != nullptr;
  if (!mma_routed(tokens, top_k)) return false;
  if (tiles_.route_logits == 0 && !mma_fc1_routes_chunk(tokens, route_experts_)) return false;  // the router's
  const bool wide = routed_local_tile_ > 0 && fc1_routed_wide_() != nullptr;  // enqueue_mma's choice
  return (wide ? fc1_routed_wide_logits_ : fc1_routed_logits_)() != nullptr;
}

bool MoeStrategyKernels::mma_routed(std::int64_t tokens, int top_k) const {
  const std::int64_t pairs = tokens * top_k;
  return !mma_per_pair(tokens) && mma_few_pairs(pairs) && pairs <= kMmaRoutedPairs;
}

int MoeStrategyKernels::pairs_per_pass(std::int64_t tokens, int top_k) const {
  if (id_ == MoeStrategy::mma) {
    if (mma_routed(tokens, top_k) && routed_local_tile_ > 0) return routed_local_tile_;
    return mma_few_pairs(tokens * top_k) ? few_tiles_.tile_m : tiles_.tile_m;
  }
  if (id_ != MoeStrategy::split) return tiles_.tile_m;
  const std::int64_t pairs = tokens * top_k;
  return shared_pairs_ > 1 && tokens > 1 && pairs <= kSplitMaxSharedPairs && pairs >= experts_ ? shared_pairs_ : 1;
}

void MoeStrategyKernels::enqueue_split(const cl::CommandQueue& queue, const MoeShape& s, const MoeDeviceWeights& w,
                                       const MoeWorkspace& ws, const MoeChunk& c, std::vector<MoeLaunch>& launches,
                                       cl::Event& last) {
  const std::int64_t pairs = c.tokens * s.top_k;
  const cl_int H = as_int(s.hidden), I = as_int(s.intermediate), k = s.top_k, offset = as_int(c.token_offset);
  const SplitGeometry& g = split_;
  // Top-k ids are routed inside FC1; router logits and shared experts' slots were routed by MoeRouter.
  const bool fused = !c.routing.routed;
  const cl::Buffer& ids = fused ? *c.routing.topk_ids : ws.pair_expert;  // read only when fused
  const cl::Buffer& weights = fused ? *c.routing.topk_weights : ws.pair_weight;
  const bool shared = pairs_per_pass(c.tokens, s.top_k) > 1;
  cl::Kernel& fc1 = shared ? fc1_shared_ : fc1_;
  set_args(fc1, "moe_split_fc1", w.split_gate, w.split_gate_scales, w.split_up, w.split_up_scales, w.fc1_factor,
           w.fc1_input_scale, w.fc2_input_scale, I, w.scale_exp, k, offset, *c.x, as_int(pairs), cl_int{fused ? 1 : 0},
           ids, weights, as_int(s.global_experts), w.expert_map, as_int(s.local_experts), ws.pair_expert,
           ws.pair_weight, ws.x2, ws.status, w.fc1_bias);
  const std::size_t tiles1 = static_cast<std::size_t>((s.intermediate + g.rows1() - 1) / g.rows1());
  moe_launch(queue, fc1, "moe_split_fc1",
             cl::NDRange(tiles1 * static_cast<std::size_t>(g.local1), static_cast<std::size_t>(pairs)),
             cl::NDRange(static_cast<std::size_t>(g.local1), 1), c, false, launches, last);
  set_args(fc2_, "moe_split_fc2", w.split_w2, w.split_w2_scales, w.fc2_factor, H, I, w.scale_exp, ws.x2,
           ws.pair_expert, ws.pair_weight, k, offset, *c.out, w.fc2_bias);
  const std::size_t tiles2 = static_cast<std::size_t>((s.hidden + g.rows2 - 1) / g.rows2);
  moe_launch(queue, fc2_, "moe_split_fc2",
             cl::NDRange(tiles2 * static_cast<std::size_t>(g.local2()), static_cast<std::size_t>(c.tokens)),
             cl::NDRange(static_cast<std::size_t>(g.local2()), 1), c, true, launches, last);
}

void MoeStrategyKernels::enqueue_sort(const cl::CommandQueue& queue, const MoeShape& s, const MoeDeviceWeights& w,
                                      const MoeWorkspace& ws, const MoeChunk& c, int tile_m, bool zero_row_blocks,
                                      std::vector<MoeLaunch>& launches, cl::Event& last) {
  const std::int64_t pairs = c.tokens * s.top_k;
  const cl_int E = as_int(s.local_experts);
  const std::size_t sort_local = std::min<std::size_t>(sort_local_limit_, static_cast<std::size_t>(E));
  // Top-k ids are routed here (routes_topk); router logits and shared experts' slots were routed by
  // MoeRouter.
  const bool fused = routes_topk() && !c.routing.routed;
  const cl::Buffer& ids = fused ? *c.routing.topk_ids : ws.pair_expert;  // read only when fused
  const cl::Buffer& weights = fused ? *c.routing.topk_weights : ws.pair_weight;
  set_args(sort_, "moe_sort", ws.pair_expert, as_int(pairs), E, cl_int{tile_m}, cl::Local(12 * static_cast<std::size_t>(E)),
           ws.pair_slot, ws.slot_pair, ws.tiles, ws.chunk_info, ws.status, cl_int{fused ? 1 : 0}, ids, weights,
           as_int(c.token_offset * s.top_k), as_int(s.global_experts), w.expert_map, ws.pair_weight,
           ws.row_blocks_done, cl_int{zero_row_blocks ? as_int(s.hidden / 16) : 0});
  moe_launch(queue, sort_, "moe_sort", cl::NDRange(sort_local), cl::NDRange(sort_local), c, false, launches, last);
}

void MoeStrategyKernels::enqueue_gather(const cl::CommandQueue& queue, const MoeShape& s, const MoeDeviceWeights& w,
                                        const MoeWorkspace& ws, const MoeChunk& c, std::vector<MoeLaunch>& launches,
                                        cl::Event& last) {
  // grouped and decode's FC1 read the BF16 pairs (x1q) too, where allocated; moe_mma_fc1 reads
  // BF16 rows.
  const bool mma = id_ == MoeStrategy::mma, pack = !mma && ws.x1q() != nullptr;
  set_args(gather_, "moe_gather", *c.x, as_int(s.hidden), s.top_k, as_int(c.token_offset), ws.slot_pair,
           ws.pair_expert, ws.chunk_info, w.fc1_input_scale, ws.x1, ws.x1q, cl_int{pack ? 1 : 0},
           cl_int{mma ? 1 : 0});
  moe_launch(queue, gather_, "moe_gather",
             cl::NDRange(static_cast<std::size_t>(s.hidden / s.block), static_cast<std::size_t>(c.tokens * s.top_k)),
             cl::NullRange, c, false, launches, last);
}

void MoeStrategyKernels::enqueue_gather_pairs(const cl::CommandQueue& queue, const MoeShape& s,
                                              const MoeDeviceWeights& w, const MoeWorkspace& ws, const MoeChunk& c,
                                              std::vector<MoeLaunch>& launches, cl::Event& last) {
  const bool fused = !c.routing.routed;
  const cl::Buffer& ids = fused ? *c.routing.topk_ids : ws.pair_expert;  // read only when fused
  set_args(gather_pairs_, "moe_gather_pairs", *c.x, as_int(s.hidden), s.top_k, as_int(c.token_offset),
           cl_int{fused ? 1 : 0}, ids, as_int(s.global_experts), w.expert_map, as_int(s.local_experts),
           ws.pair_expert, w.fc1_input_scale, ws.x1);
  moe_launch(queue, gather_pairs_, "moe_gather_pairs",
             cl::NDRange(static_cast<std::size_t>(s.hidden / s.block), static_cast<std::size_t>(c.tokens * s.top_k)),
             cl::NullRange, c, false, launches, last);
}

void MoeStrategyKernels::enqueue_mma(const cl::CommandQueue& queue, const MoeShape& s, const MoeDeviceWeights& w,
                                     const MoeWorkspace& ws, const MoeChunk& c, std::vector<MoeLaunch>& launches,
                                     cl::Event& last) {
  const std::int64_t pairs = c.tokens * s.top_k;
  const cl_int H = as_int(s.hidden), I = as_int(s.intermediate), k = s.top_k, T = as_int(c.tokens);
  const cl_int offset = as_int(c.token_offset), row_blocks = as_int(s.hidden / 16);
  // One token: every pair its own tile, routed in FC1 (no moe_sort; W4A4 quantized there too).
  // Few pairs: moe_sort's tiles of 8 and FC2 summing the top-k. Many: the configured tiles and
  // moe_reduce. W4A16 FC1 reads the input rows in place, W4A4 the gathered ones.
  // Up to kMmaRoutedPairs pairs: FC1 and FC2 find their tiles themselves, one led by each pair (no
  // moe_sort; W4A4 gathers by pair, or FC1 quantizes its tiles' tokens: routed_local_tile_).
  const bool per_pair = mma_per_pair(c.tokens), few = per_pair || mma_few_pairs(pairs);
  const bool routed = mma_routed(c.tokens, s.top_k), routed_local = routed && routed_local_tile_ > 0;
  const int tile_m = pairs_per_pass(c.tokens, s.top_k);
  const std::int64_t tiles = per_pair || routed ? pairs : moe_max_tiles(pairs, s.local_experts, tile_m);
  // Routed W4A4 chunks' FC1 with several row tiles a warp (routed_wide_, built where the tiles ask
  // for it).
  const bool wide = routed_local && fc1_routed_wide_() != nullptr;
  const MmaGeometry& g = per_pair ? pair_ : routed ? routed_ : few ? few_ : mma_;
  const MmaGemm& g1 = wide ? routed_wide_.fc1 : g.fc1;
  // Router logits that FC1 routes itself (routes_logits; the router kernel did not run).
  const bool fc1_logits = c.routing.logits != nullptr && !c.routing.routed;
  cl::Kernel& fc1 = fc1_logits ? (per_pair ? fc1_pair_logits_ : wide ? fc1_routed_wide_logits_ : fc1_routed_logits_)
                    : per_pair ? fc1_pair_
                    : wide     ? fc1_routed_wide_
                    : routed   ? fc1_routed_
                    : few      ? fc1_few_
                               : fc1_;
  if (fc1_logits && (fc1() == nullptr || c.routing.route_bias == nullptr))
    fail("MoE: router logits for a chunk of {} tokens reached an FC1 that does not route them, or without the "
         "router's bias (routes_logits, MoeRoutingInput::route_bias)",
         c.tokens);
  // Routed chunks' FC2 a work-group a token (routed_token_).
  const bool by_token = routed && fc2_routed_token_() != nullptr && mma_token_fc2(pairs, s.intermediate);
  cl::Kernel& fc2 = by_token ? fc2_routed_token_ : per_pair ? fc2_pair_ : routed ? fc2_routed_ : few ? fc2_few_ : fc2_;
  // Top-k ids are routed inside the per-pair or routed FC1; router logits (unless fc1_logits) and
  // shared experts' slots were routed by MoeRouter.
  const bool fused = (per_pair || routed) && !c.routing.routed && !fc1_logits;
  const cl::Buffer& ids = fused ? *c.routing.topk_ids : ws.pair_expert;  // read only when fused
  const cl::Buffer& weights = fused ? *c.routing.topk_weights : ws.pair_weight;
  // Every kernel's arguments are set before the first launch (NVIDIA's OpenCL starts a command as
  // it is enqueued), so no argument setting sits between two launches. Measured on an H100 it
  // changed nothing visible: the ~6 µs between moe_gather_pairs and moe_mma_fc1 stayed (the
  // enqueue itself).
  set_args(fc1, "moe_mma_fc1", w.mma_gate, w.mma_gate_scales, w.mma_up, w.mma_up_scales, w.fc1_factor, H, I,
           w.scale_exp, mma_direct_ || per_pair || routed_local ? *c.x : ws.x1, ws.tiles, ws.chunk_info,
           w.fc2_input_scale, ws.x2, ws.slot_pair, k, offset, cl_int{fc1_logits ? 2 : fused ? 1 : 0}, ids, weights,
           as_int(s.global_experts), w.expert_map, as_int(s.local_experts), ws.pair_expert, ws.pair_weight, ws.status,
           ws.row_blocks_done,
           cl_int{per_pair || routed ? row_blocks : 0}, w.fc1_input_scale, as_int(pairs), w.fc1_bias,
           fc1_logits ? *c.routing.logits : ws.pair_weight, fc1_logits ? *c.routing.route_bias : ws.pair_weight,
           cl_int{c.routing.renormalize ? 1 : 0}, c.routing.route_scaling, cl_int{s.routed_k},
           as_int(s.shared_first()));
  set_args(fc2, "moe_mma_fc2", w.mma_w2, w.mma_w2_scales, w.fc2_factor, H, I, w.scale_exp, ws.x2, ws.tiles,
           ws.chunk_info, ws.slot_pair, ws.y, ws.pair_expert, ws.pair_weight, k, T, offset, *c.out,
           ws.row_blocks_done, w.fc2_bias);
  if (!few) set_args(reduce_, "moe_reduce", ws.y, ws.pair_expert, ws.pair_weight, k, H, T, offset, *c.out);
  if (routed) {
    if (!mma_direct_ && !routed_local) enqueue_gather_pairs(queue, s, w, ws, c, launches, last);
  } else if (!per_pair) {
    enqueue_sort(queue, s, w, ws, c, tile_m, few, launches, last);
    if (!mma_direct_) enqueue_gather(queue, s, w, ws, c, launches, last);
  }
  // Blocks of rows an FC1 work-group takes (its grid that many times narrower).
  const int row_loop = per_pair ? pair_row_loop_ : routed && !wide ? routed_row_loop_ : 1;
  moe_launch(queue, fc1, "moe_mma_fc1",
             cl::NDRange(static_cast<std::size_t>(s.intermediate / g1.rows() / row_loop * g1.local()),
                         static_cast<std::size_t>(tiles)),
             cl::NDRange(static_cast<std::size_t>(g1.local()), 1), c, false, launches, last);
  if (by_token) {  // a work-group (token, block of rows), the tokens side by side
    const MmaGemm& t2 = routed_token_.fc2;
    const auto local = static_cast<std::size_t>(t2.local()) * static_cast<std::size_t>(s.top_k);
    moe_launch(queue, fc2, "moe_mma_fc2",
               cl::NDRange(static_cast<std::size_t>(c.tokens) * local, static_cast<std::size_t>(s.hidden / t2.rows())),
               cl::NDRange(local, 1), c, true, launches, last);
    return;  // FC2 summed the top-k
  }
  moe_launch(queue, fc2, "moe_mma_fc2",
             cl::NDRange(static_cast<std::size_t>(s.hidden / g.fc2.rows() * g.fc2.local()),
                         static_cast<std::size_t>(tiles)),
             cl::NDRange(static_cast<std::size_t>(g.fc2.local()), 1), c, few, launches, last);
  if (few) return;  // FC2 summed the top-k
  moe_launch(queue, reduce_, "moe_reduce",
             cl::NDRange(static_cast<std::size_t>(s.hidden / layout_.vec), static_cast<std::size_t>(c.tokens)),
             cl::NullRange, c, true, launches, last);
}

void MoeStrategyKernels::enqueue(const cl::CommandQueue& queue, const MoeShape& s, const MoeDeviceWeights& w,
                                 const MoeWorkspace& ws, const MoeChunk& c, std::vector<MoeLaunch>& launches,
                                 cl::Event& last) {
  if (id_ == MoeStrategy::split) {
    enqueue_split(queue, s, w, ws, c, launches, last);
    return;
  }
  if (id_ == MoeStrategy::mma) {
    enqueue_mma(queue, s, w, ws, c, launches, last);
    return;
  }
  const std::int64_t pairs = c.tokens * s.top_k;
  const int tile_m = pairs_per_pass(c.tokens, s.top_k);
  const std::int64_t tiles = moe_max_tiles(pairs, s.local_experts, tile_m);
  const cl_int H = as_int(s.hidden), I = as_int(s.intermediate), k = s.top_k;
  const cl_int T = as_int(c.tokens), offset = as_int(c.token_offset);
  enqueue_sort(queue, s, w, ws, c, tile_m, false, launches, last);
  enqueue_gather(queue, s, w, ws, c, launches, last);
  // Work-item counts: each covers layout_.vec rows; groups of local_i / local_h work-items.
  const std::int64_t v = layout_.vec;
  set_args(fc1_, "moe_fc1", w.gate, w.gate_scales, w.up, w.up_scales, w.fc1_factor, H, I, w.scale_exp, ws.x1,
           ws.tiles, ws.chunk_info, w.fc2_input_scale, ws.x2, ws.x1q, ws.x2q, w.fc1_bias);
  moe_launch(queue, fc1_, "moe_fc1",
             cl::NDRange(round_up((s.intermediate + v - 1) / v, tiles_.local_i), static_cast<std::size_t>(tiles)),
             cl::NDRange(static_cast<std::size_t>(tiles_.local_i), 1), c, false, launches, last);

  const std::size_t fc2_items = round_up((s.hidden + v - 1) / v, tiles_.local_h);
  const cl::NDRange fc2_local(static_cast<std::size_t>(tiles_.local_h), 1);
  if (id_ == MoeStrategy::grouped) {
    set_args(fc2_, "moe_fc2", w.down, w.down_scales, w.fc2_factor, H, I, w.scale_exp, ws.x2, ws.tiles, ws.chunk_info,
             ws.slot_pair, ws.y, ws.x2q, w.fc2_bias);
    moe_launch(queue, fc2_, "moe_fc2", cl::NDRange(fc2_items, static_cast<std::size_t>(tiles)), fc2_local, c, false, launches,
               last);
    set_args(reduce_, "moe_reduce", ws.y, ws.pair_expert, ws.pair_weight, k, H, T, offset, *c.out);
    moe_launch(queue, reduce_, "moe_reduce",
               cl::NDRange(static_cast<std::size_t>(s.hidden / v), static_cast<std::size_t>(c.tokens)), cl::NullRange,
               c, true, launches, last);
  } else {
    set_args(fc2_, "moe_fc2_reduce", w.down, w.down_scales, w.fc2_factor, H, I, w.scale_exp, ws.x2, ws.pair_expert,
             ws.pair_slot, ws.pair_weight, k, T, offset, *c.out, ws.x2q, w.fc2_bias);
    moe_launch(queue, fc2_, "moe_fc2_reduce", cl::NDRange(fc2_items, static_cast<std::size_t>(c.tokens)), fc2_local,
               c, true, launches, last);
  }
}

}  // namespace fp4cl
