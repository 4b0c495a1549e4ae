// Prompt caches of `anelab serve` held outside the engine's slots (infer::Engine::SeqSnapshot: a slot's K/V rows of
// every attention layer at positions 0..n-1, and for a model with linear-attention layers, Qwen3.5's Gated DeltaNet,
// their conv and delta-rule states at position n):
//
//   - PromptStore, `--cache-ram MiB` (llama.cpp's flag): when a slot is taken for another prompt, the sequence it held
//     moves here; a new request takes the longest cached prefix among the slots and this store. An LRU bounded in
//     bytes (Entry::bytes, counted exactly); an entry that alone exceeds the bound is not kept. A recurrent state is
//     valid only at its own position, so for such a model an entry is reused only as a whole prefix of the prompt
//     (whole_only); otherwise any prefix of an entry serves.
//   - slot files, `--slot-save-path DIR` (POST /slots/{id}?action=save|restore): one slot's sequence in a versioned
//     file, written atomically (framework/core/file.h), little-endian:
//       magic "ANESLOT\0" (8 bytes), u32 version (kSlotFileVersion), u32 H, H bytes of a JSON header
//         {"model": {"arch", "vocab_size", "n_layers", "dim", "kv_dim", "kv_layers", "kv_type", "dtype",
//                    "delta_floats", "conv_floats", "weights", "adapters"}, (SlotFingerprint; hex hashes)
//          "n_tokens", "lora": [scale of each adapter], "k_bytes", "v_bytes"},
//       i32 tokens [n_tokens], K rows then V rows ([kv_layers, n_tokens, kv_dim] of kv_type each), f32 delta-rule
//       states [delta_floats], f32 conv states [conv_floats], u64 FNV-1a 64 of every byte before it.
//     Reading checks each field against this server's model and names the first that differs.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "infer/engine.h"
#include "models/io/adapter.h"

namespace anelab::serve {

class PromptStore {
 public:
  struct Entry {
    std::vector<int32_t> tokens;  // [seq.n] the sequence's tokens
    std::vector<float> lora;      // [adapters] the LoRA scales its K/V were computed with
    infer::Engine::SeqSnapshot seq;
    int64_t bytes() const {  // everything the entry holds
      return seq.bytes() + static_cast<int64_t>((tokens.size() + lora.size()) * 4);
    }
  };
  struct Stats {
    int64_t capacity = 0, bytes = 0, entries = 0;
    uint64_t hits = 0, hit_tokens = 0;  // requests whose prefix came from the store, and those prefixes' tokens
    uint64_t stored = 0, evicted = 0;   // entries put, and dropped to stay within the capacity
  };

  // capacity_bytes 0: off (nothing is stored); whole_only: entries are reused only as a whole prefix (a model with a
  // recurrent state). Not thread-safe: the server calls it under its prompt-cache lock.
  PromptStore(int64_t capacity_bytes, bool whole_only) : capacity_(capacity_bytes), whole_only_(whole_only) {}
  bool enabled() const { return capacity_ > 0; }
  // The entry of the same LoRA scales sharing the longest prefix with `prompt`, at most prompt.size() - 1 tokens (the
  // last prompt token is always prefilled, for its logits), and that length; {null, 0} when none. Marks it used.
  std::pair<std::shared_ptr<const Entry>, size_t> find(std::span<const int32_t> prompt, const std::vector<float>& lora);
  // Whether an entry already serves every prefix `tokens` could (same scales; the same tokens, or with !whole_only
  // tokens a prefix of the entry's): then it is marked used and nothing needs storing.
  bool covers(std::span<const int32_t> tokens, const std::vector<float>& lora);
  // Stores e as the most recently used entry; entries it covers are dropped, then the least recently used ones until
  // the bytes fit the capacity. Not kept when it alone exceeds the capacity.
  void put(Entry e);
  void count_hit(size_t tokens) { ++stats_.hits, stats_.hit_tokens += tokens; }
  Stats stats() const;

 private:
  int64_t capacity_;
  bool whole_only_;
  int64_t bytes_ = 0;
  std::list<std::shared_ptr<const Entry>> lru_;  // most recently used first
  Stats stats_;
};

// What identifies the model a slot file's sequence belongs to (the "model" object of its header).
struct SlotFingerprint {
  std::string arch, kv_type, dtype;  // dtype: the engine's compute type of the weight matrices
  int64_t vocab_size = 0, n_layers = 0, dim = 0, kv_dim = 0, kv_layers = 0;
  int64_t context = 0;  // not a field of the file: a sequence of up to this many positions fits
  int64_t delta_floats = 0, conv_floats = 0;
  std::string weights;   // slot_weights_hash of the model as loaded
  std::string adapters;  // slot_adapters_hash of its runtime adapters (--lora), in order
};
// Hex FNV-1a 64 over each tensor's name, dtype, shape and its first and last 4 KiB, taken before an engine holds the
// model (Engine::tiled_rows may rewrite Q8_0 / Q4_K bytes in place, depending on how the file was loaded).
std::string slot_weights_hash(const models::Model& m);
// Hex FNV-1a 64 over the runtime adapters in order: their count, and each one's rank, alpha, and every pair's tensor
// name, shape and every byte of A and B (adapters are small). K/V computed with one adapter are not another's, even
// at the same scales.
std::string slot_adapters_hash(const std::vector<models::LoraAdapter>& adapters);
SlotFingerprint slot_fingerprint(const infer::Engine& e, std::string weights_hash, std::string adapters_hash);

// 2: the fingerprint gained "adapters" (version 1 files named only the adapters' scales).
inline constexpr uint32_t kSlotFileVersion = 2;
// Writes `seq` with its tokens and scales to path atomically; returns the bytes written. Throws anelab::Error.
int64_t write_slot_file(const std::string& path, const SlotFingerprint& fp, const std::vector<int32_t>& tokens,
                        const std::vector<float>& lora, const infer::Engine::SeqSnapshot& seq);
// Reads a slot file written for the model `fp` into out (tokens, scales, snapshot); returns the bytes read. Throws
// anelab::Error "[serve] slot file NAME: ..." naming the field that is wrong or not this model's.
int64_t read_slot_file(const std::string& path, const SlotFingerprint& fp, PromptStore::Entry& out);
// Why `name` cannot name a file in the slot directory ("" when it can): empty, '/', '\\', "..", a control byte, a
// leading '.', or over 255 bytes.
std::string slot_filename_problem(const std::string& name);

}  // namespace anelab::serve
