// The inference engine: one transformer forward for every architecture of models/arch/, with a KV cache. The
// CPU path walks the model's description (framework/core/model_desc.h, built by its architecture): each step kind
// (attention, FFN, linear attention: infer/engine_linear.cpp) and each norm, RoPE and activation kind is implemented
// once here, and no architecture flag of the config is read; a step or parameter it does not implement is refused
// at construction in one line. Linear-attention layers keep a recurrent state next to the KV cache (state_bytes).
//
//   - decode(token, pos): one token on the CPU (fused GEMVs over a persistent 2-thread pool), logits out;
//   - prefill(tokens, pos): many tokens at once. With backend "cpu" a batched CPU GEMM path (the
//     reference); "auto" (the CLI's default) is "ane" on a host with an ANE, else "cpu" — the emulator is
//     the fidelity tool, used only when asked; with "emulator" / "ane" the layers run as MIL kernels
//     (infer/prefill_mil.h), compiled per sequence-length bucket, and the KV cache is filled from the kernels' k/v
//     taps. The MIL path serves prefills that start at position 0 and fit a bucket; everything else (chat turns that
//     continue a conversation, compile budget spent) falls back to the CPU path with a note on stderr.
//
// Weights: 2-D matrices are used in the compute dtype (fp16 default, or fp32) straight from the model
// file's mapping when it already holds that dtype, otherwise converted once at load. Norm weights and
// biases are fp32 copies. Nothing is allocated per token: scratch buffers are sized at construction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/core/model_desc.h"
#include "framework/core/platform.h"
#include "framework/core/scratch.h"
#include "framework/core/thread_pool.h"
#include "framework/kernels/layer.h"
#include "framework/mil/ir.h"
#include "framework/runtime/device_profile.h"
#include "infer/cpu_attention.h"
#include "infer/cpu_deltanet.h"
#include "infer/cpu_math.h"
#include "infer/engine_options.h"
#include "infer/prefill_mil.h"
#include "models/formats/model.h"
#include "models/io/adapter.h"

namespace anelab::infer {

// Prefill backends by name (EngineOptions::backend, --backend).
inline constexpr const char* kPrefillBackends[] = {"auto", "cpu", "emulator", "ane"};
inline constexpr const char* kPrefillBackendHelp =
    "Prefill backend: auto (the ANE when this host has one, else cpu), cpu, emulator (runs the exact MIL the ANE "
    "would get: the fidelity tool, slow) or ane";
inline constexpr const char* kKvTypeHelp =
    "KV-cache element type: f32, or f16 (half the memory and the bytes decode attention reads; keys and values "
    "rounded to fp16, llama.cpp's default cache type)";
// "auto" -> "ane" when the ane backend is available on this host, else "cpu"; other known names unchanged;
// unknown names throw "[infer] unknown backend 'X' (choices: auto, cpu, emulator, ane)".
std::string resolve_prefill_backend(const std::string& name);

// One layer's weights (framework/kernels/layer.h): matrices in the compute dtype, norm weights and biases
// fp32 (held by the engine).
using kern::LayerWeights;

// Why a KV cache of `positions` x `bytes_per_position` (keys and values of every layer, of kv_type) cannot be
// reserved when the machine has `available` memory: one line naming the size and the flags that shrink it
// (--ctx, --kv-type f16), or "" when it fits or the available memory is unknown (then nothing is refused).
// `max_seq_len` is the model's, what --ctx 0 means.
std::string kv_cache_refusal(int64_t positions, int64_t bytes_per_position, KvType kv_type, int64_t n_layers,
                             int64_t max_seq_len, const platform::Reading<platform::MachineMemory>& available);

// The MIL prefill (infer/prefill_mil.h) runs for the engine through the PrefillHost part of its interface.
class Engine final : public PrefillHost {
 public:
  Engine(models::Model model, const EngineOptions& opt);
  ~Engine();

  const models::ModelConfig& config() const override { return model_.config; }
  const models::Model& model() const { return model_; }
  const models::ModelDesc& desc() const override { return desc_; }  // what the CPU path walks
  const EngineOptions& options() const override { return opt_; }
  int64_t context() const override { return ctx_; }
  ThreadPool& pool() override { return pool_; }

  // Runs tokens at positions [pos, pos + n), filling the KV cache. Returns the logits of the last token
  // ([vocab], valid until the next call). all_logits (optional) receives [n, vocab].
  const float* prefill(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits = nullptr);
  // One token at position pos (the cache must hold positions < pos).
  const float* decode(int32_t token, int64_t pos);
  // Slots (options().slots): sequences of their own, each with a KV cache of context() positions. prefill and
  // decode run on the slot chosen here (0 until then); the choice stays until the next call.
  void use_slot(int64_t slot);
  int64_t slot() const { return slot_; }
  // The batched decode step: one new token for each of B = tokens.size() distinct slots, token i at position pos[i]
  // of slot slots[i] (whose cache holds positions < pos[i]). Every weight matrix is read once for the B rows
  // (infer/cpu_math.h gemv_batch: each block of rows applied to every token while in cache), attention runs per row
  // against its slot's cache. Returns the logits [B, vocab], valid until the next call. Each row is computed by
  // decode's own kernels, so row i is bit for bit decode(tokens[i], pos[i]) on slot slots[i], whatever the other rows.
  // B >= 2 is refused for a model with linear-attention layers (one recurrent state; the constructor refuses several
  // slots for such a model). A slot may have several rows, at consecutive positions in row order (speculative drafts
  // verified: decode_run): each row stores its keys and values before the next row of its slot attends, as
  // consecutive decode calls do. B is at most max(slots, prefill chunk).
  const float* decode_batch(std::span<const int32_t> tokens, std::span<const int64_t> pos,
                            std::span<const int64_t> slots);
  // decode of tokens[i] at position pos + i for each i, on the current slot, as one batched step (decode_batch): the
  // logits [n, vocab] of each of n consecutive decode calls, bit for bit, with each weight matrix read once. The
  // verification pass of speculative decoding (infer/generate.h draft_max).
  const float* decode_run(std::span<const int32_t> tokens, int64_t pos);
  int64_t max_batch_rows() const { return rows_; }  // the most rows of one decode_batch / decode_run / prefill_batch
  // Prompt chunks of several slots in one forward (the server's batched prefill): chunk i is the tokens of segs[i] at
  // positions [pos, pos + n) of slot segs[i].slot, every weight matrix applied once to all the chunks' rows (prefill's
  // GEMM, which computes each row alone), attention and the cache per chunk as prefill runs them. Returns the logits of
  // each chunk's last token, [segs, vocab], valid until the next prefill_batch: row i is bit for bit
  // prefill(segs[i].tokens, segs[i].pos) on slot segs[i].slot, whatever the other chunks. Each chunk has 2 or more
  // tokens (one token is decode's kernels), distinct slots, at most max_batch_rows() rows in all; the CPU path only
  // (prefill_batch_takes).
  struct PrefillSeg {
    int64_t slot = 0;
    std::span<const int32_t> tokens;
    int64_t pos = 0;
  };
  const float* prefill_batch(std::span<const PrefillSeg> segs);
  // Whether prefill_batch runs for this engine: prefill on the CPU (no MIL prefill backend), no recurrent state.
  bool prefill_batch_takes() const { return !mil_ && n_lin_layers_ == 0; }
  // Runtime LoRA adapters (models/io/adapter.h), applied next to the base products and never merged into the
  // weights: an adapted projection W [out, in] (wq wk wv wo of an attention step, w_in w_up w_out of an FFN step)
  // gives, for a row x of slot s, y = W x (+ bias) + sum_j c_sj * (alpha_j / r_j) * B_j (A_j x) in fp32, c_sj being
  // slot s's scale of adapter j (lora_scales; 0 until set). The slots of one decode_batch may so use different
  // adapters and scales, each row as its slot alone; a slot whose scales are all 0 computes the base's bits. The MIL
  // prefill runs only for a slot whose scales are all 0 (its kernels hold the base alone); others prefill on the CPU.
  // add_lora returns the adapter's id (0, 1, ... in order); every tensor of it must be a projection the engine
  // computes, of its shape, else "[infer] ..." naming the tensor.
  int64_t add_lora(models::LoraAdapter a);
  int64_t lora_count() const { return static_cast<int64_t>(loras_.size()); }
  const models::LoraAdapter& lora(int64_t id) const { return loras_.at(static_cast<size_t>(id)); }
  // Slot s's scale of each adapter, [lora_count()] (refused, naming the value, when the count differs or a scale is
  // not finite). Only between forwards that involve the slot (the server sets it before its slot joins the batch).
  void set_lora_scales(int64_t slot, std::span<const float> scales);
  std::span<const float> lora_scales(int64_t slot) const;
  const PrefillStats& last_prefill() const { return stats_; }
  // Bytes of weight matrices the engine reads per token (for bandwidth figures).
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t tiled_bytes() const { return tiled_bytes_; }  // bytes of matrices held as row tiles (tiled_rows)

  // The KV cache: the one place that knows its layout, [attention layers, context, kv_dim] of options().kv_type for
  // the keys and again for the values (a linear-attention layer has no rows: its state is below).
  // The cache is [slots, attention layers, context, kv_dim] (per slot, per layer, per position a row).
  // Layer l's rows from position 0 in the current slot, as the attention kernels read them (l an attention layer).
  KvView kv_rows(int64_t l) const { return kv_rows(l, slot_); }
  KvView kv_rows(int64_t l, int64_t slot) const;
  // Writes rows pos..pos+n-1 of layer l (current slot) from k, v [n, kv_dim] fp32 (rounded to nearest even when fp16).
  void store_kv(int64_t l, int64_t pos, const float* k, const float* v, int64_t n) override {
    store_kv(l, slot_, pos, k, v, n);
  }
  void store_kv(int64_t l, int64_t slot, int64_t pos, const float* k, const float* v, int64_t n);
  // Copies positions [0, n) of every attention layer's keys and values from slot `from` to slot `to` (the prompt cache
  // across slots: a prefix another slot computed). Not for a model with linear-attention layers (one slot).
  void copy_kv(int64_t from, int64_t to, int64_t n);
  // A slot's sequence at its first n positions, copied out of the engine (the server's prompt store, slot files) and
  // back into a slot of an engine of the same model and options (save_seq / restore_seq). A model with
  // linear-attention layers keeps one recurrent state, valid only at exactly state_pos(): its snapshot is taken only
  // with n == state_pos(), and so restores only that whole prefix.
  struct SeqSnapshot {
    int64_t n = 0;
    std::vector<std::byte> k, v;  // [kv_layers, n, kv_dim] of options().kv_type, the slot's rows 0..n-1
    std::vector<float> delta;     // [linear layers, n_v_heads, k_dim, v_dim] the delta-rule states at n (else empty)
    std::vector<float> conv;      // [linear layers, conv_kernel - 1, conv_dim] the conv states at n (else empty)
    int64_t bytes() const {       // what it holds, exactly
      return static_cast<int64_t>(k.size() + v.size() + (delta.size() + conv.size()) * sizeof(float));
    }
  };
  // Refused ("[infer] ...", naming the values) for a slot outside the engine, n outside [1, context()], or, with
  // linear-attention layers, n != state_pos().
  SeqSnapshot save_seq(int64_t slot, int64_t n) const;
  // Writes s into `slot` (its rows 0..s.n-1, and the recurrent state with state_pos() = s.n); refused, naming the
  // field, when its sizes are not this engine's (another model, kv_type or context).
  void restore_seq(int64_t slot, const SeqSnapshot& s);
  // Cache bytes per position, keys and values of every attention layer: 2 * kv_layers() * kv_dim * element bytes.
  int64_t kv_bytes_per_position() const;
  int64_t kv_layers() const { return n_kv_layers_; }  // layers with an attention step (all but linear-attention ones)
  // The recurrent state of the linear-attention layers, kept with the KV cache: per such layer the delta-rule state
  // [n_v_heads, k_dim, v_dim] and the conv state [conv_kernel - 1, conv_dim], fp32, independent of the context.
  // It holds positions [0, state_pos()): a forward from position 0 resets it, one from state_pos() continues it, any
  // other position is refused (a rewind cannot be undone from a recurrent state).
  int64_t state_bytes() const;
  int64_t state_pos() const { return state_pos_; }

  // Internal pieces used by the MIL prefill path.
  const LayerWeights& layer(int64_t l) const override { return layers_[static_cast<size_t>(l)]; }
  const kern::DeltaNetWeights& deltanet(int64_t l) const override;  // engine_linear.cpp
  void store_state(int64_t l, const float* delta_state, const float* conv_state, int64_t n) override;
  // The delta-rule state [n_v_heads, k_dim, v_dim] and the conv state [conv_kernel - 1, conv_dim] of linear-attention
  // layer l (engine_linear.cpp; throws for another layer).
  std::span<const float> delta_state(int64_t l) const;
  std::span<const float> conv_state(int64_t l) const;
  // Final norm + LM head for rows [0, n) of x [n, dim] (only the rows asked for); logits [n, vocab].
  void head(const float* x, int64_t n, bool all, std::vector<float>* all_logits) override;
  void embed(std::span<const int32_t> tokens, int64_t pos, float* x) override;  // x [n, dim]
  mil::Dialect backend_dialect() const override;                // MIL dialect of the prefill backend's device profile
  const MilPrefill* mil_prefill() const { return mil_.get(); }  // null with the cpu backend

 private:
  // One RoPE of the model (the distinct RopeDescs of its layers: Gemma 3 has one for its global and one for its local
  // layers).
  struct RopeTable {
    models::RopeDesc rope;
    int64_t head_dim = 0;
    int64_t dims = 0;             // rotated leading dims of each head (head_dim unless partial)
    std::vector<double> freq;     // [dims/2] frequencies (fp32 values, run.c / HF order)
    std::vector<float> cos, sin;  // [rows_, dims/2] angles of the current forward's positions
  };

  void check_supported() const;  // throws naming the first step or parameter the CPU path does not implement
  void load_weights();
  void load_step(const models::Step& s, LayerWeights& L);
  void plan_rope();
  Mat matrix(const std::string& name);
  int64_t tiled_rows(const models::Tensor& t);
  std::span<const float> vec(const std::string& name);                           // kept in vecs_; empty when name is ""
  std::span<const float> norm_weight(const std::optional<models::NormDesc>& n);  // (offset + w); empty when absent
  void forward_cpu(std::span<const int32_t> tokens, int64_t pos, std::vector<float>* all_logits);
  // A step's norm weights (offset added), resolved at load from its layer's LayerWeights by their names.
  struct StepNormSpans {
    std::span<const float> pre, pre_bias, post;  // [dim]
    std::span<const float> q, k;                 // [head_dim] (attention steps with q/k norms)
  };
  void run_step(int64_t l, size_t step, int64_t pos, int64_t n);  // desc_.layers[l].steps[step]
  void attention(int64_t l, const models::AttnDesc& a, const StepNormSpans& w, int64_t pos, int64_t n);
  void ffn(int64_t l, const models::FfnDesc& f, const LayerWeights& L, int64_t n);
  // The adapted projections, by site (LoRA on wq wk wv wo, w_in w_up w_out, a Gated DeltaNet's w_qkv w_z w_b w_a
  // w_out).
  enum class LoraSite { kQ, kK, kV, kO, kIn, kUp, kOut, kLinQkv, kLinZ, kLinB, kLinA, kLinOut };
  static constexpr int64_t kLoraSites = 12;
  // y [n, out] += each row's adapters' products on x [n, in] (rows of stride in / out) at site of layer l.
  void lora_apply(int64_t l, LoraSite site, const float* x, int64_t n, float* y);
  bool lora_on(int64_t slot) const;  // any nonzero scale
  void project(const Mat& w, const float* bias, const float* x, int64_t n, float* y);
  // A Gated DeltaNet layer's weights (framework/kernels/deltanet.h: the MIL prefill's DeltaNet kernel reads them too).
  using DeltaWeights = kern::DeltaNetWeights;
  void plan_layers();  // kv_slot_, lin_slot_ and the linear-attention scratch and state
  void load_deltanet(const models::DeltaNetDesc& d, DeltaWeights& W);
  void linear_attention(int64_t l, const models::DeltaNetDesc& d, int64_t n);
  void begin_state(int64_t pos);  // resets or checks the linear-attention state for a forward from pos
  void elementwise(int64_t count, FunctionRef<void(int64_t, int64_t)> fn);
  void rope_rows(float* x, int64_t n, int64_t heads, const RopeTable& t);
  void add_rows(float* x, const float* y, int64_t count, float scale);
  void head_norm_rows(float* v, const models::NormDesc& nd, std::span<const float> w, int64_t rows, int64_t head_dim);
  void soft_cap(float* logits, int64_t count);
  void norm_rows(const float* x, const models::NormDesc& nd, std::span<const float> w, std::span<const float> b,
                 int64_t n, float* out);

  models::Model model_;
  models::ModelDesc desc_;  // built from model_.config by its architecture
  EngineOptions opt_;
  ThreadPool pool_;
  int64_t ctx_ = 0;
  int64_t chunk_ = 0;
  int64_t rows_ = 0;  // scratch rows: max(chunk_, slots)
  int64_t slot_ = 0;  // the slot prefill / decode run on
  // During decode_batch: per row its position and slot ([B]); empty otherwise.
  std::span<const int64_t> batch_pos_, batch_slot_;
  std::vector<int64_t> run_pos_, run_slot_;   // decode_run's positions and slots (grown once)
  std::vector<KvView> batch_kv_;              // during decode_batch: each row's cache rows in the current layer
  std::vector<float> batch_logits_;           // [rows of the largest batched step so far (slots at first), vocab]
  std::span<const PrefillSeg> prefill_segs_;  // during prefill_batch: the chunks, their rows in order; empty otherwise
  std::vector<int64_t> prefill_slot_;         // during prefill_batch: each row's slot (batch_slot_ views it, for LoRA)
  std::vector<float> prefill_logits_;         // [chunks of the largest prefill_batch so far, vocab]
  int64_t weight_bytes_ = 0;
  int64_t tiled_bytes_ = 0;
  std::vector<std::shared_ptr<void>> owned_;           // converted matrices
  std::map<std::string, int64_t, std::less<>> tiled_;  // Q8_0 tensors rewritten as row tiles: their tiled rows
  std::vector<LayerWeights> layers_;
  std::vector<std::vector<StepNormSpans>> step_norms_;  // [n_layers][steps of the layer]
  std::deque<std::vector<float>> vecs_;                 // the norm weights and biases the layers point into
  Mat tok_emb_, pos_emb_, out_;                         // [vocab, dim], [max_seq, dim], [vocab, dim]
  std::span<const float> norm_, norm_b_;                // [dim] (in vecs_)
  Scratch<std::byte> kcache_, vcache_;  // [slots, L, ctx, kv_dim] fp32 or fp16 (pages resident only when written)
  // Scratch, [chunk, *] row-major (token-major).
  // Not value-initialised: a decode-only run keeps only the first row of each resident.
  Scratch<float> x_, xb_, q_, k_, v_, att_, h1_, h3_;
  CpuAttention attn_;             // attention kernels and their workspaces (keys transposed, scores)
  std::vector<RopeTable> ropes_;  // the distinct RoPEs of the layers
  std::vector<int> layer_rope_;   // [n_layers] index into ropes_; -1: the layer has no RoPE
  std::vector<float> logits_;     // [vocab]
  // Layer kinds: the cache slot of each attention layer and the state slot of each linear-attention layer (-1: none).
  std::vector<int64_t> kv_slot_, lin_slot_;  // [n_layers]
  int64_t n_kv_layers_ = 0, n_lin_layers_ = 0;
  Scratch<float> qg_;  // [chunk, 2*q_dim]: a gated attention's q projection, per head [q | gate]
  // The linear-attention layers (all of one shape, models::DeltaNetDesc; C = conv_dim, V = Hv*v_dim, Q = Hk*k_dim):
  std::vector<DeltaWeights> delta_;                 // [n_layers], filled for the linear-attention layers
  models::DeltaNetDesc lin_;                        // their shape (the first one's)
  Scratch<float> dstate_;                           // [n_lin, Hv, k_dim, v_dim] delta-rule states
  Scratch<float> cstate_;                           // [n_lin, K-1, C] conv states (oldest input first)
  Scratch<float> lqkv_, lmix_, lq_, lk_, lv_, lz_;  // [chunk, C] x2, [chunk, Q] x2, [chunk, V] x2
  Scratch<float> lb_, la_, lo_;                     // [chunk, Hv] beta, [chunk, Hv] g, [chunk, V] output
  std::unique_ptr<DeltaRuleChunked> chunked_;       // the prefill's chunked delta rule and its scratch
  // Runtime LoRA (add_lora): the adapters, and for each (adapter, layer, site) its pair or null.
  std::deque<models::LoraAdapter> loras_;
  std::vector<const models::LoraPair*> lora_pair_;  // [adapters, n_layers, kLoraSites]
  std::vector<std::vector<float>> lora_scale_;      // [slots][adapters]
  Scratch<float> lora_t_;                           // [rows_, lora_rank_max_]: A x of each row
  int64_t lora_rank_max_ = 0;
  int64_t state_pos_ = 0;
  PrefillStats stats_;
  std::unique_ptr<MilPrefill> mil_;
};

// Whether the model has layers with a recurrent state (linear attention): then an engine holds one sequence.
bool has_recurrent_state(const models::ModelConfig& c);

// Parses "fp16"/"f16" or "fp32"/"f32" (other model dtypes are converted at load to one of these).
WType parse_wtype(const std::string& s);
// `--dtype auto`: fp32 when every weight matrix of the model is stored in fp32 (llama2.c files, training
// checkpoints and their fp32 exports, so they all compute alike), else fp16; with it the CLI sets
// EngineOptions::keep_quantized, so block-quantized matrices stay in their blocks.
WType auto_wtype(const models::Model& m);

// Throws "[infer] layer L STEP: WHAT is not supported by the CPU inference engine" for the first step or parameter
// of `desc` the engine does not implement (Engine's constructor calls it with its model's description).
void check_engine_supports(const models::ModelDesc& desc, const models::ModelConfig& config);

}  // namespace anelab::infer
