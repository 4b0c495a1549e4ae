// CPU attention of the inference engine (fp32, written against framework/simd): causal attention of n new
// query rows at positions pos..pos+n-1 over the KV-cache rows [0, pos+n), optionally limited to a key
// window, with grouped-query heads (query head h reads kv head h / (n_heads / n_kv_heads)).
//
//   - rows: one query (token, head) at a time: a dot product per key, vectorised softmax, one axpy per
//     V row. Decode (n = 1), small batches and head sizes the blocked path does not take.
//   - blocked: prefill batches with head_dim 64, 128, 192 or 256. The keys [first key, pos+n) are
//     transposed once per call into kt [kv_dim][ld]; each work item is a tile of kTileRows consecutive
//     tokens of one head. Scores are register tiles of kTileRows queries x (kTileCols vectors of keys), so
//     every key vector loaded from kt serves all the tile's queries; only the key blocks some query of the
//     tile sees are visited (causal end, key-window start). Softmax is vectorised per row (the tile's
//     keys outside a row's range get weight 0), then P V accumulates kTileRows x (kTileCols vectors of
//     head_dim) in registers, so each V vector loaded serves all the tile's queries too.
// Both compute each score as an fp32 dot product over head_dim times the scale and accumulate P V in fp32,
// in different orders (the blocked path sums over head_dim one term at a time per key lane); they agree to
// fp32 rounding.
//
// The cache rows are fp32 or fp16 (KvType, --kv-type). fp16 rows are widened to fp32 as they are read
// (load_h: vcvtph2ps / FCVTL; the blocked path converts while it transposes the keys), and the arithmetic
// is the fp32 one, in the same order: attention over an fp16 cache gives the same bits as attention over an
// fp32 cache holding the same (fp16-rounded) values.
//
// Workspaces are reused across calls: the scores sized by reserve() for the whole context (else grown to the
// largest call seen), the transposed keys grown to the longest prefill seen, so decode allocates nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/core/scratch.h"
#include "framework/core/thread_pool.h"
#include "framework/simd/simd.h"

namespace anelab::infer {

struct AttentionShape {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // n_heads a multiple of n_kv_heads
  float scale = 1.0f;                                 // score = scale * q . k
  int64_t window = 0;                                 // > 0: a query at p sees keys p-window+1..p; 0: 0..p
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

// Element type of the KV cache (EngineOptions::kv_type, --kv-type): fp32, or fp16 (IEEE binary16 bits,
// rounded to nearest even when written: half the memory, and half the bytes decode attention reads).
enum class KvType { kF32, kF16 };
inline std::vector<std::string> kv_type_names() { return {"f32", "f16"}; }  // the --kv-type choices
// "f32" | "f16"; anything else throws "[infer] unknown --kv-type 'X' (choices: f32, f16)".
KvType parse_kv_type(const std::string& s);
inline const char* kv_type_name(KvType t) { return t == KvType::kF16 ? "f16" : "f32"; }
inline int64_t kv_type_bytes(KvType t) { return t == KvType::kF16 ? 2 : 4; }

// One layer's KV-cache rows as the kernels read them: keys and values [positions, kv_dim] of `type`.
struct KvView {
  const void* k = nullptr;
  const void* v = nullptr;
  KvType type = KvType::kF32;
};

class CpuAttention {
 public:
  // Register tile of the blocked path: queries x vectors (of keys for the scores, of head_dim for P V):
  // 6 x 4 = 24 accumulators with 32 vector registers, 6 x 2 = 12 with 16, plus one row of loads and a
  // broadcast.
  static constexpr int kTileRows = 6;
  static constexpr int kTileCols = simd::kRegs >= 32 ? 4 : 2;

  // The blocked path serves this batch: n >= 8 and head_dim a multiple of 64 up to 256 (64, 128, Gemma's 256).
  static bool blocked_fits(int64_t n, int64_t head_dim) { return n >= 8 && head_dim % 64 == 0 && head_dim <= 256; }

  // Sizes the scores for pool workers and positions [0, context).
  void reserve(int workers, int64_t context);

  // q [n, q_dim] (tokens at positions pos..pos+n-1), kv: rows [pos+n, kv_dim] (the cache), out [n, q_dim].
  // Picks blocked when it fits, else rows.
  void run(ThreadPool& pool, const AttentionShape& s, const float* q, const KvView& kv, int64_t pos, int64_t n,
           float* out);
  void rows(ThreadPool& pool, const AttentionShape& s, const float* q, const KvView& kv, int64_t pos, int64_t n,
            float* out);
  void blocked(ThreadPool& pool, const AttentionShape& s, const float* q, const KvView& kv, int64_t pos, int64_t n,
               float* out);
  // The rows of a batched decode step in one pass over the pool: query i (q [B, q_dim]) at position pos[i] over its
  // own cache kv[i] (rows [pos[i] + 1, kv_dim]) into out [B, q_dim]; each (query, head) as rows() computes it.
  void rows_batch(ThreadPool& pool, const AttentionShape& s, const float* q, std::span<const KvView> kv,
                  std::span<const int64_t> pos, float* out);

 private:
  // Scratch whose contents do not outlive a call: sized for the whole context by reserve() (decode allocates
  // nothing), but only the pages a call writes (its ld, not the context's) become resident.
  Scratch<float> kt_;      // [kv_dim, ld] keys transposed, ld = pos+n rounded up to 64 (blocked)
  Scratch<float> scores_;  // [workers, kTileRows, ld] (blocked) or [workers, ld] (rows)
};

}  // namespace anelab::infer
