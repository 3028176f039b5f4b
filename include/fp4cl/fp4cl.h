/* fp4cl C API: FP4 (NVFP4, MXFP4) linear and Mixture-of-Experts layers on OpenCL, for C and any
 * foreign-function interface (ctypes, cffi, Rust, Go, ...). C99; no C++ in this header.
 *
 *   fp4cl_context* ctx;  fp4cl_model* model;  fp4cl_linear* lin;
 *   if (fp4cl_context_create("default", &ctx) != FP4CL_SUCCESS) puts(fp4cl_last_error());
 *   fp4cl_model_open(ctx, "/models/qwen3-moe-nvfp4", &model);
 *   fp4cl_model_get_linear(model, "model.layers.0.self_attn.q_proj", NULL, &lin);
 *   fp4cl_linear_run(lin, x, x_bytes, m, y, y_bytes);            host arrays, synchronous
 *   fp4cl_linear_enqueue(lin, x_mem, y_mem, m, 0, NULL, &done);  cl_mem buffers, asynchronous
 *   fp4cl_linear_release(lin);  fp4cl_model_release(model);  fp4cl_context_release(ctx);
 *
 * Conventions
 * - Every function that can fail returns an fp4cl_status. On failure it sets a message for the
 *   calling thread (fp4cl_last_error()) naming the argument, tensor or file and what was
 *   expected, and leaves its output arguments untouched. Every such call clears the message on
 *   entry, so after a success fp4cl_last_error() returns "". No C++ exception, abort or exit
 *   crosses this interface: internal failures become FP4CL_ERROR_INTERNAL.
 * - Handles are opaque. fp4cl_*_release(NULL) does nothing. A model keeps its context alive and
 *   a layer keeps its context alive, so handles may be released in any order.
 * - BF16 values are passed as their 16 raw bits (uint16_t, the upper half of an IEEE fp32).
 *   Arrays are row-major and dense. Sizes are in bytes (x_bytes, ...): a host array or cl_mem
 *   buffer smaller than the shape needs is an FP4CL_ERROR_INVALID_ARGUMENT naming it; a larger one
 *   is fine (only the leading bytes are used).
 * - Asynchronous calls (fp4cl_*_enqueue) run on the context's command queue after the events in
 *   wait_list. When `done` is not NULL it receives a new event (the caller owns it and calls
 *   clReleaseEvent) that completes when the call's output is written. The cl_mem buffers must
 *   belong to the context's cl_context and stay alive until `done` completes.
 * - Thread safety: fp4cl_context and fp4cl_model may be shared between threads. A layer handle
 *   (fp4cl_linear, fp4cl_moe) owns a workspace and must be used by one thread at a time; create
 *   one per thread (cheap to do from one model) to run in parallel. Calls of one layer are
 *   ordered on the queue (each waits for the previous one).
 * - Determinism: the same inputs give bit-identical outputs on the same device, and the same bits
 *   as the C++ API (fp4cl::Linear, fp4cl::MoeLayer) that this interface is built on.
 *
 * Numerics and formats: README.md and the C++ headers fp4cl/linear.hpp and fp4cl/moe.hpp.
 */
#ifndef FP4CL_FP4CL_H
#define FP4CL_FP4CL_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#if defined(__APPLE__)
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

/* Symbols of the shared library: exported; everything else in it is hidden. */
#if defined(_WIN32)
#define FP4CL_API
#elif defined(__GNUC__)
#define FP4CL_API __attribute__((visibility("default")))
#else
#define FP4CL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ------------------------------------------------------------------------------ */

/* The version of this header. fp4cl_version() gives the library's, which may be newer. */
#define FP4CL_VERSION_MAJOR 0
#define FP4CL_VERSION_MINOR 1
#define FP4CL_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH: 0.1.0 -> 100. */
#define FP4CL_VERSION (FP4CL_VERSION_MAJOR * 10000 + FP4CL_VERSION_MINOR * 100 + FP4CL_VERSION_PATCH)

/* The library's version as FP4CL_VERSION encodes it, and as a string ("0.1.0"). The library is
 * compatible with a header of the same MAJOR and a MINOR not above its own. */
FP4CL_API uint32_t fp4cl_version(void);
FP4CL_API const char* fp4cl_version_string(void);

/* ---- Errors ------------------------------------------------------------------------------- */

typedef enum fp4cl_status {
  FP4CL_SUCCESS = 0,
  FP4CL_ERROR_INVALID_ARGUMENT = 1,   /* null handle or pointer, size too small, bad option */
  FP4CL_ERROR_NOT_FOUND = 2,          /* no layer of that name, index or kind */
  FP4CL_ERROR_INVALID_MODEL = 3,      /* the model directory cannot be read or is malformed */
  FP4CL_ERROR_DEVICE_NOT_FOUND = 4,   /* no OpenCL device matches the selector */
  FP4CL_ERROR_OPENCL = 5,             /* an OpenCL call failed: fp4cl_last_cl_status() says how */
  FP4CL_ERROR_OUT_OF_MEMORY = 6,      /* host or device memory exhausted */
  FP4CL_ERROR_INVALID_EXPERT_ID = 7,  /* a topk id outside [0, E_global): the output is invalid */
  FP4CL_ERROR_UNSUPPORTED = 8,        /* valid, but not something fp4cl can run */
  FP4CL_ERROR_INTERNAL = 9            /* a bug in fp4cl: please report the message */
} fp4cl_status;

/* The calling thread's message for its last failed call ("" when the last call succeeded). The
 * pointer stays valid until the thread's next fp4cl call. Never NULL. */
FP4CL_API const char* fp4cl_last_error(void);

/* The OpenCL status (CL_OUT_OF_RESOURCES, ...) behind the calling thread's last failure, or
 * CL_SUCCESS (0) when it did not come from OpenCL. */
FP4CL_API int32_t fp4cl_last_cl_status(void);

/* "FP4CL_SUCCESS", "FP4CL_ERROR_INVALID_ARGUMENT", ...; "FP4CL_UNKNOWN_STATUS" otherwise. */
FP4CL_API const char* fp4cl_status_name(fp4cl_status status);

/* ---- Enumerations ------------------------------------------------------------------------- */

typedef enum fp4cl_weight_format {
  FP4CL_WEIGHT_NVFP4 = 0,  /* E2M1, blocks of 16 with an E4M3 scale, fp32 global scale */
  FP4CL_WEIGHT_MXFP4 = 1   /* E2M1, blocks of 32 with an E8M0 scale */
} fp4cl_weight_format;

typedef enum fp4cl_activations {
  FP4CL_ACTIVATIONS_FP4 = 0,  /* W4A4: activations quantized to FP4 inside the layer */
  FP4CL_ACTIVATIONS_BF16 = 1  /* W4A16: activations stay BF16 */
} fp4cl_activations;

typedef enum fp4cl_dtype {
  FP4CL_DTYPE_BF16 = 0,  /* 2 bytes, uint16_t bits */
  FP4CL_DTYPE_FP32 = 1   /* 4 bytes, float */
} fp4cl_dtype;

typedef enum fp4cl_layer_kind {
  FP4CL_LAYER_LINEAR = 0,  /* one quantized linear module */
  FP4CL_LAYER_MOE = 1      /* the routed experts of one MoE layer */
} fp4cl_layer_kind;

/* ---- Context ------------------------------------------------------------------------------ */

/* A device, its OpenCL context and in-order command queue, and the compiled kernels. */
typedef struct fp4cl_context fp4cl_context;

/* Creates a context (and a queue with profiling) on the device `selector` picks:
 *   NULL                 the environment variable FP4CL_DEVICE, else as "default"
 *   "" or "default"      the first GPU, else the first CPU of PoCL, else the first CPU/device
 *   "gpu", "cpu", "accelerator"   the first device of that kind
 *   "P:D"                device D of platform P (as `fp4cl devices` lists them)
 *   anything else        the first device whose name (or "platform device") contains it
 * FP4CL_ERROR_DEVICE_NOT_FOUND (the message lists every device) when nothing matches. */
FP4CL_API fp4cl_status fp4cl_context_create(const char* selector, fp4cl_context** out);

/* Wraps the caller's OpenCL context and queue. fp4cl retains both (clRetainContext,
 * clRetainCommandQueue) and releases them when the last handle that uses them is released.
 * The queue must belong to `context` and be in-order; its device is the one fp4cl runs on. */
FP4CL_API fp4cl_status fp4cl_context_wrap(cl_context context, cl_command_queue queue, fp4cl_context** out);

FP4CL_API void fp4cl_context_release(fp4cl_context* ctx);

/* The OpenCL objects fp4cl uses (borrowed: not retained; valid while `ctx` lives). Any of the
 * output pointers may be NULL. */
FP4CL_API fp4cl_status fp4cl_context_get_cl(const fp4cl_context* ctx, cl_context* context, cl_command_queue* queue,
                                            cl_device_id* device);

/* One line naming the device: "0:0 cpu-haswell-... (Portable Computing Language, CPU, ...)".
 * Owned by `ctx`; "" for NULL. */
FP4CL_API const char* fp4cl_context_device_description(const fp4cl_context* ctx);

/* Blocks until every command fp4cl (or anyone) put on the context's queue has completed. */
FP4CL_API fp4cl_status fp4cl_context_finish(fp4cl_context* ctx);

/* ---- Model -------------------------------------------------------------------------------- */

/* A quantized model directory (config.json / hf_quant_config.json and safetensors shards of a
 * ModelOpt or compressed-tensors NVFP4/MXFP4 checkpoint), opened on a context. */
typedef struct fp4cl_model fp4cl_model;

/* Opens `directory`: reads its configuration and tensor headers and discovers the quantized
 * layers (weights are read when a layer is created). FP4CL_ERROR_INVALID_MODEL with a message
 * naming the file, tensor and what was expected when the directory is not a model fp4cl can
 * read. The model retains `ctx`. */
FP4CL_API fp4cl_status fp4cl_model_open(fp4cl_context* ctx, const char* directory, fp4cl_model** out);

FP4CL_API void fp4cl_model_release(fp4cl_model* model);

/* One quantized layer of a model. */
typedef struct fp4cl_layer_info {
  const char* name;        /* linear: "model.layers.0.self_attn.q_proj"; MoE:
                              "model.layers.0.mlp.experts". Owned by the model. */
  int32_t kind;            /* fp4cl_layer_kind */
  int32_t weight_format;   /* fp4cl_weight_format */
  int32_t activations;     /* fp4cl_activations */
  int32_t top_k;           /* MoE: config.json's num_experts_per_tok, 0 when it does not say */
  int64_t out_features;    /* linear: N of the weight [N, K]; 0 for MoE */
  int64_t in_features;     /* linear: K; 0 for MoE */
  int64_t num_experts;     /* MoE: E, the experts stored; 0 for linear */
  int64_t hidden;          /* MoE: H; 0 for linear */
  int64_t intermediate;    /* MoE: I, per expert; 0 for linear */
} fp4cl_layer_info;

/* The number of quantized layers: linear modules plus one per MoE layer (expert projections are
 * not listed as linear layers). */
FP4CL_API fp4cl_status fp4cl_model_layer_count(const fp4cl_model* model, size_t* count);

/* Layer `index` in model order: sorted by name with the numbers in names compared as numbers
 * ("layers.2" before "layers.10"), which is the order of the decoder layers. */
FP4CL_API fp4cl_status fp4cl_model_layer_info(const fp4cl_model* model, size_t index, fp4cl_layer_info* info);

/* The index of the layer named `name`: a linear module, an MoE layer's name, or an MoE layer's
 * decoder-layer prefix ("model.layers.3"). FP4CL_ERROR_NOT_FOUND when there is none. */
FP4CL_API fp4cl_status fp4cl_model_find_layer(const fp4cl_model* model, const char* name, size_t* index);

/* ---- Linear layer ------------------------------------------------------------------------- */

/* y = x · Wᵀ for one quantized linear module, its weights prepared on the device. */
typedef struct fp4cl_linear fp4cl_linear;

typedef struct fp4cl_linear_options {
  int64_t max_tokens;  /* workspace capacity in tokens (larger m run in chunks); default 512 */
  int32_t output;      /* fp4cl_dtype of y; default FP4CL_DTYPE_BF16 */
} fp4cl_linear_options;

/* Fills `options` with the defaults. */
FP4CL_API void fp4cl_linear_options_init(fp4cl_linear_options* options);

/* Loads linear layer `name` (or layer `index` of fp4cl_model_layer_info) and prepares it on the
 * model's context. options NULL: the defaults. FP4CL_ERROR_NOT_FOUND when the model has no such
 * linear layer (an MoE layer's name is one too). The layer retains the context, not the model. */
FP4CL_API fp4cl_status fp4cl_model_get_linear(fp4cl_model* model, const char* name,
                                              const fp4cl_linear_options* options, fp4cl_linear** out);
FP4CL_API fp4cl_status fp4cl_model_get_linear_at(fp4cl_model* model, size_t index,
                                                 const fp4cl_linear_options* options, fp4cl_linear** out);

FP4CL_API void fp4cl_linear_release(fp4cl_linear* layer);

typedef struct fp4cl_linear_info {
  int64_t n;              /* out_features */
  int64_t k;              /* in_features */
  int64_t max_tokens;
  int32_t weight_format;  /* fp4cl_weight_format */
  int32_t activations;    /* fp4cl_activations */
  int32_t output;         /* fp4cl_dtype */
} fp4cl_linear_info;

FP4CL_API fp4cl_status fp4cl_linear_get_info(const fp4cl_linear* layer, fp4cl_linear_info* info);

/* The kernel that runs a call of m rows (1 <= m < 2^31), its tuning parameters and where they
 * come from (built-in defaults, a tuning database file and bucket, or an environment variable):
 * one line, as fp4cl-bench prints it (Linear::kernel_description). Copied into `buffer`
 * NUL-terminated and cut to size - 1 bytes; *length (when not NULL) receives its full length
 * without the NUL, so a call with size 0 (buffer may then be NULL) asks for the size. */
FP4CL_API fp4cl_status fp4cl_linear_describe_kernel(const fp4cl_linear* layer, int64_t m, char* buffer, size_t size,
                                                    size_t* length);

/* Enqueues y = x · Wᵀ: x BF16 [m, k], y [m, n] of the output dtype, 0 <= m < 2^31 (m = 0
 * enqueues only a marker; m > max_tokens runs in chunks of max_tokens, never refused).
 * Asynchronous (see Conventions). */
FP4CL_API fp4cl_status fp4cl_linear_enqueue(fp4cl_linear* layer, cl_mem x, cl_mem y, int64_t m,
                                            cl_uint num_wait, const cl_event* wait_list, cl_event* done);

/* The same on host arrays, synchronous: x holds at least m·k BF16 values (x_bytes >= 2·m·k),
 * y at least m·n values of the output dtype. 0 <= m < 2^31. */
FP4CL_API fp4cl_status fp4cl_linear_run(fp4cl_linear* layer, const uint16_t* x, size_t x_bytes, int64_t m, void* y,
                                        size_t y_bytes);

/* ---- MoE layer ---------------------------------------------------------------------------- */

/* The fused routed-experts block of one MoE layer:
 *   out[t] = sum over s < k of topk_weights[t,s] · Expert_{topk_ids[t,s]}(x[t])   (s in order)
 *   Expert_e(x) = FC2_e(bf16(silu(x · gate_eᵀ) · (x · up_eᵀ)))
 * where the checkpoint's expert projections have biases, each GEMM's bias added to its sums; and
 * with the activation config.json implies: SwiGLU as above, or for gpt-oss (model_type
 * "gpt_oss", or a swiglu_limit stated) its clamped form with limit swiglu_limit (default 7) and
 * alpha 1.702: g = min(gate sum, limit), u = clamp(up sum, -limit, limit), bf16(g / (1 +
 * e^(-alpha · g)) · (u + 1)) (MoeActivation and ModelConfig::activation in the C++ API).
 * Routing comes either precomputed (topk_ids int32 [T, k], topk_weights fp32 [T, k]) or as router
 * logits fp32 [T, E_global], routed on the device as config.json's model does: softmax over all
 * experts, then top-k; or DeepSeek-V3's gate (scoring_func sigmoid, topk_method noaux_tc or
 * group_limited_greedy with n_group / topk_group, routed_scaling_factor, and the checkpoint's
 * "<p>.gate.e_score_correction_bias"; also Kimi-K2 and GLM-4.5: MoeLogitRouting in the C++ API).
 * Where fp4cl does not compute the model's routing (another scoring_func, or the bias tensor
 * missing), the logit calls fail naming why and precomputed top-k ids still run. x and out are
 * [T, H]. A batch larger than max_tokens runs in chunks (never refused). */
typedef struct fp4cl_moe fp4cl_moe;

typedef struct fp4cl_moe_options {
  int64_t max_tokens;      /* workspace capacity in tokens; default 256 */
  int32_t output;          /* fp4cl_dtype of out; default FP4CL_DTYPE_BF16 */
  int32_t top_k;           /* k; 0 (default): config.json's num_experts_per_tok */
  int32_t renormalize;     /* logit path: 1 divide the k weights by their sum, 0 do not,
                              -1 (default): what config.json's model says */
  /* Expert parallelism: expert_map[g] is the local expert (0 .. E-1, an expert this model
   * stores) that global expert g maps to, or -1 when another rank holds it (its slots
   * contribute nothing here). NULL (default): every expert is local, E_global = E. Copied. */
  const int32_t* expert_map;
  size_t expert_map_size;  /* E_global when expert_map is not NULL */
  /* 1: a token's output bits depend neither on max_tokens (how a call is cut into chunks) nor
   * on the other tokens of a call run with the same strategy (FP4CL_MOE_KERNEL forces one), at
   * some speed (MoeConfig::batch_invariant in fp4cl/moe.hpp); 0 (default): they may, within the
   * reference bound and bit-identical run to run. */
  int32_t batch_invariant;
} fp4cl_moe_options;

FP4CL_API void fp4cl_moe_options_init(fp4cl_moe_options* options);

/* Loads MoE layer `name` (its name or its decoder layer's prefix, or layer `index` of
 * fp4cl_model_layer_info), stacks and prepares its experts on the model's context. options NULL:
 * the defaults. FP4CL_ERROR_NOT_FOUND when there is no such MoE layer; FP4CL_ERROR_INVALID_MODEL
 * when top_k is 0 and config.json does not say it. */
FP4CL_API fp4cl_status fp4cl_model_get_moe(fp4cl_model* model, const char* name, const fp4cl_moe_options* options,
                                           fp4cl_moe** out);
FP4CL_API fp4cl_status fp4cl_model_get_moe_at(fp4cl_model* model, size_t index, const fp4cl_moe_options* options,
                                              fp4cl_moe** out);

/* The gated MLP whose quantized projections are "<prefix>.gate_proj", "<prefix>.up_proj" and
 * "<prefix>.down_proj" (an MoE layer's shared expert, "model.layers.3.mlp.shared_experts", or a
 * dense layer's MLP, "model.layers.0.mlp"), as an MoE layer of one expert with k = 1: run it with
 * every topk id 0 and every weight 1 (fp4cl_moe_run); it has no router (the logit calls fail).
 * options: max_tokens, output and batch_invariant as for fp4cl_model_get_moe; top_k 0 or 1,
 * renormalize -1, no expert_map. FP4CL_ERROR_NOT_FOUND when a projection is not a quantized
 * linear module of the checkpoint (Checkpoint::load_mlp in the C++ API). */
FP4CL_API fp4cl_status fp4cl_model_get_mlp(fp4cl_model* model, const char* prefix, const fp4cl_moe_options* options,
                                           fp4cl_moe** out);

FP4CL_API void fp4cl_moe_release(fp4cl_moe* layer);

typedef struct fp4cl_moe_info {
  int64_t num_experts;        /* E_global: the range of valid topk ids */
  int64_t num_local_experts;  /* E: the experts this layer holds */
  int64_t hidden;             /* H */
  int64_t intermediate;       /* I */
  int64_t max_tokens;
  int32_t top_k;              /* k */
  int32_t weight_format;      /* fp4cl_weight_format */
  int32_t activations;        /* fp4cl_activations */
  int32_t output;             /* fp4cl_dtype */
} fp4cl_moe_info;

FP4CL_API fp4cl_status fp4cl_moe_get_info(const fp4cl_moe* layer, fp4cl_moe_info* info);

/* FC1's activation, as config.json chose it (the formula above). */
typedef enum fp4cl_moe_activation_kind {
  FP4CL_MOE_ACTIVATION_SWIGLU = 0,         /* silu(g) · u */
  FP4CL_MOE_ACTIVATION_SWIGLU_CLAMPED = 1  /* gpt-oss's: g, u clamped by limit, g · sigmoid(alpha · g) · (u + 1) */
} fp4cl_moe_activation_kind;

typedef struct fp4cl_moe_activation {
  int32_t kind;  /* fp4cl_moe_activation_kind */
  float alpha;   /* SWIGLU_CLAMPED: 1.702; 0 for SWIGLU */
  float limit;   /* SWIGLU_CLAMPED: config.json's swiglu_limit, 7 when it does not say; 0 for SWIGLU */
} fp4cl_moe_activation;

/* The activation `layer` runs. */
FP4CL_API fp4cl_status fp4cl_moe_get_activation(const fp4cl_moe* layer, fp4cl_moe_activation* activation);

/* How the layer routes router logits (the formula in MoeLogitRouting, fp4cl/moe_logit_routing.hpp). */
typedef enum fp4cl_moe_scoring {
  FP4CL_MOE_SCORING_SOFTMAX = 0, /* softmax over the token's E_global logits */
  FP4CL_MOE_SCORING_SIGMOID = 1  /* sigmoid of each logit (DeepSeek-V3, Kimi-K2, GLM-4.5) */
} fp4cl_moe_scoring;

typedef struct fp4cl_moe_routing {
  int32_t logits;          /* 1: the logit calls route on the device; 0: they fail, naming why (config.json's
                              router is not one fp4cl computes, or its bias tensor is missing) */
  int32_t scoring;         /* fp4cl_moe_scoring */
  int32_t groups;          /* expert groups (n_group; 1: none) */
  int32_t top_groups;      /* groups kept (topk_group) */
  int32_t correction_bias; /* 1: keys are scores + the gate's e_score_correction_bias */
  int32_t renormalize;     /* 1: the k weights are divided by their sum */
  float scaling_factor;    /* × every weight (routed_scaling_factor) */
} fp4cl_moe_routing;

/* The router `layer` runs on logits, as config.json and the checkpoint chose it. */
FP4CL_API fp4cl_status fp4cl_moe_get_routing(const fp4cl_moe* layer, fp4cl_moe_routing* routing);

/* fp4cl_model_get_moe / fp4cl_model_get_moe_at with FC1's activation chosen by the caller instead
 * of config.json (a checkpoint whose config.json does not say it; MoeConfig::activation in the
 * C++ API). activation NULL: config.json's, as fp4cl_model_get_moe. SWIGLU takes alpha = limit =
 * 0 (as fp4cl_moe_get_activation reports it); SWIGLU_CLAMPED a finite alpha > 0 and limit > 0.
 * Anything else is FP4CL_ERROR_INVALID_ARGUMENT naming the field. */
FP4CL_API fp4cl_status fp4cl_model_get_moe_with_activation(fp4cl_model* model, const char* name,
                                                           const fp4cl_moe_options* options,
                                                           const fp4cl_moe_activation* activation, fp4cl_moe** out);
FP4CL_API fp4cl_status fp4cl_model_get_moe_at_with_activation(fp4cl_model* model, size_t index,
                                                              const fp4cl_moe_options* options,
                                                              const fp4cl_moe_activation* activation,
                                                              fp4cl_moe** out);

/* fp4cl_model_get_moe_with_activation / fp4cl_model_get_moe_at_with_activation with the layer's
 * shared expert fused into it: the gated MLP "<p>.shared_experts" beside its experts "<p>.experts"
 * (DeepSeek-V2/V3, Kimi-K2, GLM-4.5). Every token then goes through it with weight 1 besides its
 * top_k routed experts, summed after them in the same fixed-order fp32 sum and rounded once:
 * out[t] = sum_s topk_weights[t,s] * Expert_{topk_ids[t,s]}(x[t]) + Shared(x[t]). Calls take the
 * routed [T, top_k] ids and weights, or logits over the routed experts, as before; the router's
 * weights (its scaling factor included) are the routed experts' only. A shared expert of P times
 * the routed experts' intermediate size (n_shared_experts P) runs as P experts of theirs
 * (fp4cl_moe_get_shared_experts gives P). FP4CL_ERROR_NOT_FOUND when the layer has no shared
 * expert; FP4CL_ERROR_INVALID_ARGUMENT with an expert_map (every rank would add it);
 * FP4CL_ERROR_INVALID_MODEL when its scheme or sizes do not fit the routed experts' (run it with
 * fp4cl_model_get_mlp instead). Checkpoint::load_moe with MoeLoadOptions::shared_experts in the
 * C++ API. */
FP4CL_API fp4cl_status fp4cl_model_get_moe_with_shared_experts(fp4cl_model* model, const char* name,
                                                               const fp4cl_moe_options* options,
                                                               const fp4cl_moe_activation* activation,
                                                               fp4cl_moe** out);
FP4CL_API fp4cl_status fp4cl_model_get_moe_at_with_shared_experts(fp4cl_model* model, size_t index,
                                                                  const fp4cl_moe_options* options,
                                                                  const fp4cl_moe_activation* activation,
                                                                  fp4cl_moe** out);

/* The shared experts `layer` adds to every token: 0, or P from
 * fp4cl_model_get_moe_with_shared_experts. fp4cl_moe_info's num_local_experts counts them,
 * num_experts (the range of valid ids) does not. */
FP4CL_API fp4cl_status fp4cl_moe_get_shared_experts(const fp4cl_moe* layer, int32_t* count);

/* The strategy that runs a call of `tokens` tokens (1 <= tokens < 2^31), its tiles and where
 * they come from: "mma: tile_m 32, local sizes 32 and 32, ... [tuned bucket 512 (FILE)]"
 * (MoeLayer::kernel_description). Copied as fp4cl_linear_describe_kernel copies. */
FP4CL_API fp4cl_status fp4cl_moe_describe_kernel(const fp4cl_moe* layer, int64_t tokens, char* buffer, size_t size,
                                                 size_t* length);

/* Enqueues a forward pass of `tokens` tokens with precomputed routing. Asynchronous (see
 * Conventions). A topk id outside [0, E_global) never indexes memory: the device skips that slot
 * and records it; fp4cl_moe_finish() reports it. */
FP4CL_API fp4cl_status fp4cl_moe_enqueue(fp4cl_moe* layer, cl_mem x, cl_mem topk_ids, cl_mem topk_weights, cl_mem out,
                                         int64_t tokens, cl_uint num_wait, const cl_event* wait_list,
                                         cl_event* done);

/* The same with router logits fp32 [T, E_global]. */
FP4CL_API fp4cl_status fp4cl_moe_enqueue_logits(fp4cl_moe* layer, cl_mem x, cl_mem router_logits, cl_mem out,
                                                int64_t tokens, cl_uint num_wait, const cl_event* wait_list,
                                                cl_event* done);

/* Waits for the layer's latest enqueue and checks it: FP4CL_ERROR_INVALID_EXPERT_ID naming the
 * first invalid (token, slot) and its id, in which case that call's output must not be used.
 * Only the latest call can be checked (the next enqueue resets the record). Success when nothing
 * was enqueued. */
FP4CL_API fp4cl_status fp4cl_moe_finish(fp4cl_moe* layer);

/* Host arrays, synchronous: x BF16 [T, H], topk_ids int32 [T, k], topk_weights fp32 [T, k], out
 * [T, H] of the output dtype. Ids are checked on the host before anything runs:
 * FP4CL_ERROR_INVALID_EXPERT_ID names the first one outside [0, E_global). */
FP4CL_API fp4cl_status fp4cl_moe_run(fp4cl_moe* layer, const uint16_t* x, size_t x_bytes, const int32_t* topk_ids,
                                     size_t topk_ids_bytes, const float* topk_weights, size_t topk_weights_bytes,
                                     int64_t tokens, void* out, size_t out_bytes);

/* Host arrays with router logits fp32 [T, E_global]. */
FP4CL_API fp4cl_status fp4cl_moe_run_logits(fp4cl_moe* layer, const uint16_t* x, size_t x_bytes,
                                            const float* router_logits, size_t router_logits_bytes, int64_t tokens,
                                            void* out, size_t out_bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FP4CL_FP4CL_H */
