// The prompt store (`--cache-ram`, infer/server/prompt_store.h) and slot files (`--slot-save-path`, POST
// /slots/{id}?action=save|restore|erase), stories260K in process on the CPU (skipped without the shared data):
//   - the store alone (synthetic entries): LRU eviction within the byte bound, bytes counted exactly, covered entries
//     dropped, whole-prefix reuse for a model with a recurrent state;
//   - a prefix evicted from every slot comes back from the store (cached_tokens), and answers what a fresh prefill
//     answers (greedy text, as the cross-slot test checks); without the store it is prefilled again;
//   - the store never exceeds its bound over a run of distinct prompts; sequences of other LoRA scales are not reused;
//   - save -> restore (into another server) -> the same continuation; each refusal (names, missing, damaged, another
//     model's file, another version) names what is wrong; /slots shows each slot's LoRA scales, /props the adapters,
//     /metrics the store.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "framework/core/file.h"
#include "infer/server/api.h"
#include "infer/server/engine_adapter.h"
#include "infer/server/http_server.h"
#include "infer/server/prompt_store.h"
#include "models/formats/checkpoint_header.h"
#include "models/io/adapter.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "tests/common/lora_adapter.h"
#include "tests/common/test_data.h"
#include "tests/serve/http_test_helpers.h"
#include "tests/serve/stories_pool.h"

namespace anelab::serve {
namespace {

// A synthetic entry: n tokens from `first`, kv bytes of K and of V, `state` floats of recurrent state.
PromptStore::Entry pstore_entry(int32_t first, size_t n, size_t kv, size_t state = 0) {
  PromptStore::Entry e;
  for (size_t i = 0; i < n; ++i) e.tokens.push_back(first + static_cast<int32_t>(i));
  e.seq.n = static_cast<int64_t>(n);
  e.seq.k.assign(kv, std::byte{1});
  e.seq.v.assign(kv, std::byte{2});
  e.seq.delta.assign(state, 0.5f);
  return e;
}

TEST(PromptStore, EvictsLeastRecentlyUsedWithinItsByteBound) {
  const int64_t per = pstore_entry(0, 10, 100).bytes();
  EXPECT_EQ(per, 100 + 100 + 10 * 4) << "bytes are K + V + states + tokens + scales, exactly";
  PromptStore s(3 * per, false);
  s.put(pstore_entry(0, 10, 100));
  s.put(pstore_entry(100, 10, 100));
  s.put(pstore_entry(200, 10, 100));
  EXPECT_EQ(s.stats().bytes, 3 * per);
  std::vector<int32_t> prompt{0, 1, 2, 3, 4, 5, 99};
  auto [hit, n] = s.find(prompt, {});  // entry 0 becomes the most recent
  ASSERT_TRUE(hit);
  EXPECT_EQ(n, 6u);
  s.put(pstore_entry(300, 10, 100));  // evicts entry 100, the least recently used
  EXPECT_EQ(s.stats().entries, 3);
  EXPECT_EQ(s.stats().evicted, 1u);
  EXPECT_LE(s.stats().bytes, 3 * per);
  EXPECT_FALSE(s.find(std::vector<int32_t>{100, 101, 102}, {}).first);
  EXPECT_TRUE(s.find(std::vector<int32_t>{0, 1, 2}, {}).first);
  EXPECT_FALSE(s.find(std::vector<int32_t>{0, 1, 2}, {0.5f}).first) << "other LoRA scales reused";
  // An entry larger than the bound is not kept; one that extends another replaces it.
  s.put(pstore_entry(400, 10, 2 * static_cast<size_t>(per)));
  EXPECT_EQ(s.stats().entries, 3);
  EXPECT_TRUE(s.covers(std::vector<int32_t>{0, 1, 2, 3}, {}));
  s.put(pstore_entry(0, 12, 120));  // drops entry 0 (covered), then entry 200 (least recent) to fit
  EXPECT_EQ(s.stats().entries, 2);
  EXPECT_EQ(s.stats().evicted, 2u);
  EXPECT_EQ(s.stats().bytes, per + 2 * 120 + 12 * 4);
  EXPECT_EQ(s.find(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {}).second, 12u);
}

TEST(PromptStore, RecurrentEntriesAreReusedOnlyWhole) {
  PromptStore s(1 << 20, true);
  s.put(pstore_entry(0, 8, 64, 16));
  EXPECT_EQ(s.stats().bytes, 64 + 64 + 16 * 4 + 8 * 4);
  EXPECT_FALSE(s.find(std::vector<int32_t>{0, 1, 2, 3, 9}, {}).first) << "a recurrent state reused mid-sequence";
  EXPECT_FALSE(s.find(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, {}).first) << "the last prompt token is prefilled";
  EXPECT_EQ(s.find(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}, {}).second, 8u);
  EXPECT_FALSE(s.covers(std::vector<int32_t>{0, 1, 2}, {}));
  s.put(pstore_entry(0, 4, 32, 16));  // a shorter prefix is a different state: both kept
  EXPECT_EQ(s.stats().entries, 2);
}

TEST(PromptStore, SlotActionRequestsAndFileNames) {
  SlotActionRequest a;
  EXPECT_FALSE(parse_slot_action("/slots/1", "/slots/1?action=save", R"({"filename": "a.bin"})", Limits{}, a));
  EXPECT_EQ(a.slot, 1u);
  EXPECT_EQ(a.action, SlotAction::kSave);
  EXPECT_EQ(a.filename, "a.bin");
  EXPECT_FALSE(parse_slot_action("/slots/0", "/slots/0?x=1&action=erase", "", Limits{}, a));
  EXPECT_EQ(a.action, SlotAction::kErase);
  auto e = parse_slot_action("/slots/0", "/slots/0?action=load", "{}", Limits{}, a);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "action");
  e = parse_slot_action("/slots/x", "/slots/x?action=save", "{}", Limits{}, a);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "id_slot");
  e = parse_slot_action("/slots/0", "/slots/0?action=restore", "{}", Limits{}, a);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "filename");
  for (const char* bad : {"", "a/b", "../a", "..", "a\\b", ".hidden", "a\nb"})
    EXPECT_NE(slot_filename_problem(bad), "") << "'" << bad << "' accepted";
  EXPECT_EQ(slot_filename_problem("slot-0.bin"), "");
}

std::unique_ptr<ModelPool> pstore_pool(int64_t cache_ram_mib, const std::string& slot_dir = "",
                                       std::vector<std::string> lora = {}, const std::string& model = "") {
  const std::string m = model.empty() ? anelab::test::data_path("llama2c/stories260K.bin") : model,
                    tok = anelab::test::data_path("llama2c/tok512.bin");
  if (!std::filesystem::exists(m) || !std::filesystem::exists(tok)) return nullptr;
  ModelOptions o;
  o.load.model = m, o.load.tokenizer = tok, o.load.backend = "cpu";
  o.load.lora = std::move(lora);
  o.warmup_tokens = 0;
  o.cache_ram_mib = cache_ram_mib;
  o.slot_save_path = slot_dir;
  return std::make_unique<ModelPool>(o, 1);
}

std::string pstore_story() {
  const std::string text = anelab::test::data_path("tinystories/tinystories_valid_prefix.txt");
  if (!std::filesystem::exists(text)) return "";
  std::ifstream f(text);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

GenOutcome pstore_run(ModelPool& pool, const std::string& prompt, bool cache = true,
                      const nlohmann::json& lora = nullptr) {
  nlohmann::json b{{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"cache_prompt", cache}};
  if (!lora.is_null()) b["lora"] = lora;
  return test::run_completion(pool, b.dump(), 0);
}

TEST(PromptStore, PrefixEvictedFromTheSlotIsReusedFromTheStore) {
  auto pool = pstore_pool(64), plain = pstore_pool(0);
  const std::string story = pstore_story();
  if (!pool || story.empty()) GTEST_SKIP() << "shared data absent: stories260K or tinystories";
  const std::string a = story.substr(0, 700), other = story.substr(1000, 600);
  for (ModelPool* p : {pool.get(), plain.get()}) {
    const GenOutcome first = pstore_run(*p, a + " Then");
    EXPECT_EQ(first.usage.cached_tokens, 0);
    pstore_run(*p, other);  // the one slot is taken for another prompt: a's sequence leaves it
  }
  const GenOutcome back = pstore_run(*pool, a + " One day");
  const GenOutcome again = pstore_run(*plain, a + " One day");
  const GenOutcome fresh = pstore_run(*plain, a + " One day", false);
  EXPECT_LE(again.usage.cached_tokens, 1) << "without the store the slot kept a's prefix (beyond the BOS)";
  EXPECT_GE(back.usage.cached_tokens, back.usage.prompt_tokens - 8) << "a's prefix was not taken from the store";
  EXPECT_EQ(back.text, fresh.text) << "the stored K/V answer differently from a fresh prefill";
  const PromptCacheFigures f = pool->prompt_cache();
  EXPECT_TRUE(f.enabled);
  EXPECT_EQ(f.capacity_bytes, int64_t(64) << 20);
  EXPECT_EQ(pstore_pool(-1)->prompt_cache().capacity_bytes, std::numeric_limits<int64_t>::max()) << "-1: no bound";
  EXPECT_FALSE(plain->prompt_cache().enabled);
  EXPECT_EQ(f.hits, 1u);
  EXPECT_EQ(f.hit_tokens, static_cast<uint64_t>(back.usage.cached_tokens));
  EXPECT_EQ(f.stored, 2u);  // a's sequence, then other's when a came back
  std::printf("[prompt store] %lld-token prompt: prefill %.2f ms fresh, %.2f ms with %lld tokens from the store\n",
              static_cast<long long>(fresh.usage.prompt_tokens), fresh.usage.prefill_ms, back.usage.prefill_ms,
              static_cast<long long>(back.usage.cached_tokens));
}

// Slots of one engine (--parallel 2, continuous batching): a sequence saved from slot 0 is restored into slot 1 (the
// store holds rows of one slot, not its place in the cache), next to another sequence on slot 0.
TEST(PromptStore, SequenceOfOneSlotComesBackIntoAnother) {
  const std::string story = pstore_story();
  auto made = [] {
    ModelOptions o;
    o.load.model = anelab::test::data_path("llama2c/stories260K.bin");
    o.load.tokenizer = anelab::test::data_path("llama2c/tok512.bin");
    o.load.backend = "cpu", o.warmup_tokens = 0, o.cache_ram_mib = 64;
    return std::filesystem::exists(o.load.model) && std::filesystem::exists(o.load.tokenizer)
               ? std::make_unique<ModelPool>(o, 2)
               : nullptr;
  }();
  if (!made || story.empty()) GTEST_SKIP() << "shared data absent: stories260K or tinystories";
  ModelPool& pool = *made;
  auto run_on = [&](const std::string& prompt, size_t w, bool cache) {
    const nlohmann::json b{{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}, {"cache_prompt", cache}};
    CompletionRequest r;
    EXPECT_FALSE(parse_request(Endpoint::kCompletions, b.dump(), Limits{}, r));
    GenParams p;
    EXPECT_FALSE(pool.prepare(r, p));
    Job job(p);
    job.started = std::chrono::steady_clock::now();
    return pool.run(w, job);
  };
  const std::string a = story.substr(0, 700);
  run_on(a + " Then", 0, true);
  run_on(story.substr(1000, 500), 1, true);
  run_on(story.substr(2000, 500), 0, true);  // slot 0 taken: a's sequence moves into the store
  const GenOutcome back = run_on(a + " One day", 1, true);
  EXPECT_GE(back.usage.cached_tokens, back.usage.prompt_tokens - 8) << "a did not come back into slot 1";
  EXPECT_EQ(pool.prompt_cache().hits, 1u);
  EXPECT_EQ(back.text, run_on(a + " One day", 0, false).text) << "restored into slot 1, a answers differently";
}

TEST(PromptStore, StaysWithinItsBoundOverDistinctPrompts) {
  auto pool = pstore_pool(1);  // 1 MiB: a few sequences of stories260K (kv 1280 bytes a position)
  const std::string story = pstore_story();
  if (!pool || story.size() < 9000) GTEST_SKIP() << "shared data absent: stories260K or tinystories";
  int64_t most = 0;
  for (size_t i = 0; i < 16; ++i) {
    pstore_run(*pool, story.substr(i * 500, 400 + 20 * i));
    const PromptCacheFigures f = pool->prompt_cache();
    EXPECT_LE(f.bytes, f.capacity_bytes) << "after prompt " << i;
    most = std::max(most, f.bytes);
  }
  const PromptCacheFigures f = pool->prompt_cache();
  EXPECT_EQ(f.capacity_bytes, 1 << 20);
  EXPECT_GT(f.evicted, 0u) << "16 distinct prompts should not fit 1 MiB";
  EXPECT_EQ(f.stored, 15u);
  std::printf("[prompt store] 16 distinct prompts: at most %lld of %lld bytes, %lld entries, %llu evicted\n",
              static_cast<long long>(most), static_cast<long long>(f.capacity_bytes), static_cast<long long>(f.entries),
              static_cast<unsigned long long>(f.evicted));
}

// A request of token ids on worker w.
GenOutcome pstore_run_ids(ModelPool& pool, const std::vector<int32_t>& ids, int64_t max_tokens, size_t w,
                          bool cache = true) {
  const nlohmann::json b{{"prompt", ids}, {"max_tokens", max_tokens}, {"temperature", 0}, {"cache_prompt", cache}};
  return test::run_completion(pool, b.dump(), w);
}

std::vector<int32_t> pstore_ids(ModelPool& pool, const std::string& text, bool bos) {
  std::vector<int32_t> ids;
  EXPECT_FALSE(pool.tokenize(text, bos, ids, nullptr));
  return ids;
}

template <class... T>
std::vector<int32_t> pstore_cat(const std::vector<int32_t>& a, const T&... rest) {
  std::vector<int32_t> out = a;
  (out.insert(out.end(), rest.begin(), rest.end()), ...);
  return out;
}

// Qwen3.5 (the tiny Hugging Face fixture with tok512, whose vocabulary of 512 it shares): an engine per worker, each
// with one recurrent state. A sequence worker 0 computed moves into the store when its slot is taken for another
// prompt, and worker 1 (another engine) continues it from the store, K/V and DeltaNet states restored: the greedy
// answer is the one worker 0 gives without the cache. A prompt that shares only part of a cached sequence is prefilled
// from 0 (a recurrent state exists only at the end of its sequence). A slot file carries the states to another server.
// Requests of 1 token leave the slot holding exactly the prompt.
TEST(PromptStore, Qwen35StatesComeBackFromTheStoreAndSlotFiles) {
  const std::string tok = anelab::test::data_path("llama2c/tok512.bin"), story = pstore_story();
  if (!std::filesystem::exists(tok) || story.empty()) GTEST_SKIP() << "shared data absent: tok512 or tinystories";
  const std::string dir = anelab::test::temp_dir("prompt_store_q35").string();
  ModelOptions o;
  o.load.model = anelab::test::source_path("tests/fixtures/hf/qwen35_bf16");
  o.load.tokenizer = tok, o.load.backend = "cpu", o.warmup_tokens = 0, o.cache_ram_mib = 16, o.slot_save_path = dir;
  ModelPool pool(o, 2);
  const std::vector<int32_t> a = pstore_ids(pool, story.substr(0, 300), true),
                             b = pstore_ids(pool, story.substr(1000, 200), true),
                             x = pstore_ids(pool, " Then they went home.", false);
  ASSERT_LT(a.size() + x.size() + 16, 256u);
  pstore_run_ids(pool, a, 1, 0);
  pstore_run_ids(pool, b, 1, 0);  // a's sequence (K/V and states at its end) moves into the store
  const GenOutcome from_store = pstore_run_ids(pool, pstore_cat(a, x), 16, 1);
  EXPECT_EQ(from_store.usage.cached_tokens, static_cast<int64_t>(a.size())) << "a did not come from the store";
  EXPECT_EQ(pool.prompt_cache().hits, 1u);
  const GenOutcome fresh = pstore_run_ids(pool, pstore_cat(a, x), 16, 0, false);
  EXPECT_EQ(fresh.usage.cached_tokens, 0);
  EXPECT_EQ(from_store.text, fresh.text) << "the restored states answer differently from a fresh prefill";
  // Part of a cached sequence only: no state there, prefilled from 0.
  const std::vector<int32_t> part = pstore_cat(std::vector<int32_t>(a.begin(), a.end() - 5), x);
  EXPECT_EQ(pstore_run_ids(pool, part, 1, 1).usage.cached_tokens, 0);
  // Slot 1 now holds `part`, its states at its end: saved, restored into another server, continued.
  nlohmann::json out;
  ASSERT_FALSE(pool.slot_action(1, SlotAction::kSave, "q.bin", out));
  EXPECT_EQ(out["n_saved"], part.size());
  o.cache_ram_mib = 0;
  ModelPool other(o, 1);
  ASSERT_FALSE(other.slot_action(0, SlotAction::kRestore, "q.bin", out));
  const GenOutcome restored = pstore_run_ids(other, pstore_cat(part, x), 16, 0);
  EXPECT_EQ(restored.usage.cached_tokens, static_cast<int64_t>(part.size()));
  EXPECT_EQ(restored.text, pstore_run_ids(pool, pstore_cat(part, x), 16, 0, false).text);
  std::printf(
      "[prompt store] qwen35: %zu-token prompt, prefill %.2f ms fresh, %.2f ms with %lld tokens and the "
      "states from the store\n",
      a.size() + x.size(), fresh.usage.prefill_ms, from_store.usage.prefill_ms,
      static_cast<long long>(from_store.usage.cached_tokens));
}

// The LoRA adapter file and a model with it merged (another model's weights, same shapes).
struct PstoreFiles {
  std::string dir, adapter, other_adapter, merged;  // other_adapter: another seed, the same shapes
};
std::optional<PstoreFiles> pstore_files() {
  const std::string model = anelab::test::data_path("llama2c/stories260K.bin");
  if (!std::filesystem::exists(model)) return std::nullopt;
  PstoreFiles f;
  f.dir = anelab::test::temp_dir("prompt_store").string();
  models::Model m = models::load_any_model(model);
  const models::LoraAdapter a = anelab::test::seeded_lora_adapter(m.config, 4, 8.0f, 17, 0.3f);
  f.adapter = f.dir + "/a.gguf";
  models::write_gguf_adapter(a, m.config, f.adapter);
  f.other_adapter = f.dir + "/b.gguf";
  models::write_gguf_adapter(anelab::test::seeded_lora_adapter(m.config, 4, 8.0f, 18, 0.3f), m.config, f.other_adapter);
  models::merge_lora(m, a, 1.0f);
  f.merged = f.dir + "/merged.anelab";
  models::save_model(m, f.merged);
  return f;
}

TEST(PromptStore, OtherLoraScalesAreNotReused) {
  auto files = pstore_files();
  const std::string story = pstore_story();
  if (!files || story.empty()) GTEST_SKIP() << "shared data absent";
  auto pool = pstore_pool(64, "", {files->adapter});
  ASSERT_TRUE(pool);
  const std::string a = story.substr(0, 600);
  const nlohmann::json on = nlohmann::json::array({{{"id", 0}, {"scale", 1.0}}}),
                       off = nlohmann::json::array({{{"id", 0}, {"scale", 0.0}}});
  pstore_run(*pool, a + " Then", true, on);
  pstore_run(*pool, story.substr(1000, 400), true, on);
  EXPECT_EQ(pstore_run(*pool, a + " One", true, off).usage.cached_tokens, 0) << "K/V of other scales reused";
  const GenOutcome same = pstore_run(*pool, a + " One day", true, on);
  EXPECT_GT(same.usage.cached_tokens, 100) << "the sequence of the same scales was not reused from the store";
  EXPECT_EQ(same.text, pstore_run(*pool, a + " One day", false, on).text);
}

TEST(SlotFile, SaveRestoreContinuesTheSameAndRefusesBadFiles) {
  auto files = pstore_files();
  const std::string story = pstore_story();
  if (!files || story.empty()) GTEST_SKIP() << "shared data absent";
  const std::string dir = files->dir + "/slots";
  std::filesystem::create_directories(dir);
  auto pool = pstore_pool(0, dir), other = pstore_pool(0, dir);
  const std::string a = story.substr(0, 700);
  const GenOutcome first = pstore_run(*pool, a);
  nlohmann::json out;
  ASSERT_FALSE(pool->slot_action(0, SlotAction::kSave, "a.bin", out));
  const int64_t held = first.usage.prompt_tokens + first.usage.completion_tokens - 1;
  EXPECT_EQ(out["id_slot"], 0);
  EXPECT_EQ(out["filename"], "a.bin");
  EXPECT_EQ(out["n_saved"], held);
  EXPECT_EQ(out["n_written"], static_cast<int64_t>(std::filesystem::file_size(dir + "/a.bin")));
  EXPECT_TRUE(out["timings"].contains("save_ms"));
  // Restored into another server: the same prompt continues from the file, as the first answered.
  ASSERT_FALSE(other->slot_action(0, SlotAction::kRestore, "a.bin", out));
  EXPECT_EQ(out["n_restored"], held);
  EXPECT_EQ(out["n_read"], static_cast<int64_t>(std::filesystem::file_size(dir + "/a.bin")));
  EXPECT_TRUE(out["timings"].contains("restore_ms"));
  const GenOutcome again = pstore_run(*other, a);
  EXPECT_EQ(again.usage.cached_tokens, again.usage.prompt_tokens - 1);
  EXPECT_EQ(again.text, first.text) << "the restored K/V answer differently";
  const GenOutcome longer = pstore_run(*other, a + first.text + " The end.");
  EXPECT_GE(longer.usage.cached_tokens, again.usage.prompt_tokens - 3);
  EXPECT_EQ(longer.text, pstore_run(*pool, a + first.text + " The end.", false).text);
  // Erase: the slot forgets its tokens.
  ASSERT_FALSE(other->slot_action(0, SlotAction::kErase, "", out));
  EXPECT_GT(out["n_erased"].get<int64_t>(), held);
  EXPECT_EQ(pstore_run(*other, a).usage.cached_tokens, 0);

  // Refusals, each naming what is wrong.
  auto refused = [&](ModelPool& p, SlotAction act, const std::string& name, const std::string& says) {
    nlohmann::json o;
    const auto e = p.slot_action(0, act, name, o);
    ASSERT_TRUE(e) << name << " accepted";
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find(says), std::string::npos) << e->message;
  };
  refused(*pool, SlotAction::kSave, "../a.bin", "'..'");
  refused(*pool, SlotAction::kSave, "sub/a.bin", "path separator");
  refused(*pool, SlotAction::kRestore, "", "empty");
  refused(*pool, SlotAction::kRestore, "absent.bin", "no such file");
  const std::vector<uint8_t> good = read_file_bytes(dir + "/a.bin");
  std::vector<uint8_t> b = good;
  b[b.size() / 2] ^= 1;
  write_file_atomic(dir + "/damaged.bin", b.data(), b.size());
  refused(*pool, SlotAction::kRestore, "damaged.bin", "checksum");
  b = good;
  b[8] = 9;  // the version
  write_file_atomic(dir + "/v9.bin", b.data(), b.size());
  refused(*pool, SlotAction::kRestore, "v9.bin", "version 9");
  write_file_atomic(dir + "/short.bin", good.data(), 20);
  refused(*pool, SlotAction::kRestore, "short.bin", "not a slot file");
  {  // a header field out of range, the checksum made right again: the field is named
    const uint32_t hlen =
        uint32_t(good[12]) | uint32_t(good[13]) << 8 | uint32_t(good[14]) << 16 | uint32_t(good[15]) << 24;
    nlohmann::json h = nlohmann::json::parse(good.begin() + 16, good.begin() + 16 + hlen);
    h["n_tokens"] = 9999;
    const std::string hs = h.dump();
    std::vector<uint8_t> f(good.begin(), good.begin() + 12);
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<uint8_t>(hs.size() >> (8 * i)));
    f.insert(f.end(), hs.begin(), hs.end());
    f.insert(f.end(), good.begin() + 16 + hlen, good.end() - 8);
    const uint64_t sum = models::fnv1a64(models::kFnvOffset, f.data(), f.size());
    for (int i = 0; i < 8; ++i) f.push_back(static_cast<uint8_t>(sum >> (8 * i)));
    write_file_atomic(dir + "/n.bin", f.data(), f.size());
    refused(*pool, SlotAction::kRestore, "n.bin", "n_tokens 9999 outside [1, 512]");
  }
  auto merged = pstore_pool(0, dir, {}, files->merged);  // same shapes, other weights
  pstore_run(*merged, a);
  ASSERT_FALSE(merged->slot_action(0, SlotAction::kSave, "merged.bin", out));
  refused(*pool, SlotAction::kRestore, "merged.bin", "model.weights is");
  ModelOptions o16;  // the same model with an fp16 KV cache
  o16.load.model = anelab::test::data_path("llama2c/stories260K.bin");
  o16.load.tokenizer = anelab::test::data_path("llama2c/tok512.bin");
  o16.load.backend = "cpu", o16.load.kv_type = "f16", o16.warmup_tokens = 0, o16.slot_save_path = dir;
  ModelPool f16(o16, 1);
  refused(f16, SlotAction::kRestore, "a.bin", R"(model.kv_type is "f32", this server's model has "f16")");
  // Adapters: the same file restores; another adapter of the same shapes (same count, same scales) is refused.
  auto with_a = pstore_pool(0, dir, {files->adapter}), same_a = pstore_pool(0, dir, {files->adapter}),
       with_b = pstore_pool(0, dir, {files->other_adapter});
  pstore_run(*with_a, a);
  ASSERT_FALSE(with_a->slot_action(0, SlotAction::kSave, "lora.bin", out));
  EXPECT_FALSE(same_a->slot_action(0, SlotAction::kRestore, "lora.bin", out));
  refused(*with_b, SlotAction::kRestore, "lora.bin", "model.adapters is");
  refused(*pool, SlotAction::kRestore, "lora.bin", "model.adapters is");
  // A slot that is generating is a 409 (polled while a 350-token prompt runs on it).
  std::atomic<bool> done{false};
  std::thread gen([&] {
    pstore_run(*pool, a + " Then", false);
    done = true;
  });
  int busy = 0;
  while (!done) {
    nlohmann::json o;
    if (const auto be = pool->slot_action(0, SlotAction::kErase, "", o); be && be->status == 409) ++busy;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  gen.join();
  EXPECT_GT(busy, 0) << "no 409 while the slot generated";
  auto no_dir = pstore_pool(0);
  const auto e = no_dir->slot_action(0, SlotAction::kSave, "a.bin", out);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 501);
  EXPECT_EQ(pool->slot_action(3, SlotAction::kErase, "", out)->param, "id_slot");
}

TEST(SlotFile, HttpRoutesSlotsPropsAndMetrics) {
  auto files = pstore_files();
  if (!files) GTEST_SKIP() << "shared data absent";
  const std::string dir = files->dir + "/http";
  std::filesystem::create_directories(dir);
  auto pool = pstore_pool(8, dir, {files->adapter});
  ServerOptions so;
  so.port = 0, so.log_requests = false;
  HttpServer srv(*pool, so);
  const int port = srv.bind();
  std::thread th([&] { srv.run(); });
  while (!srv.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  using test::body_json, test::request, test::roundtrip, test::status_of;
  std::string resp =
      roundtrip(port, request("POST", "/completion",
                              R"({"prompt": "Once upon a time", "n_predict": 4, "lora": [{"id": 0, "scale": 0.25}]})"));
  EXPECT_EQ(status_of(resp), 200);
  // Another prompt takes the slot, then the first comes back from the store: llama.cpp's tokens_cached, and
  // timings.cache_n / prompt_n (tokens taken from the cache / evaluated).
  const std::string lora = R"("lora": [{"id": 0, "scale": 0.25}])";
  roundtrip(port, request("POST", "/completion", R"({"prompt": "The dog ran", "n_predict": 2, )" + lora + "}"));
  resp = roundtrip(
      port, request("POST", "/completion", R"({"prompt": "Once upon a time, there", "n_predict": 4, )" + lora + "}"));
  const nlohmann::json back = body_json(resp);
  EXPECT_GE(back["tokens_cached"].get<int64_t>(), 4) << back.dump();
  EXPECT_EQ(back["timings"]["cache_n"], back["tokens_cached"]);
  EXPECT_EQ(back["timings"]["prompt_n"].get<int64_t>(),
            back["tokens_evaluated"].get<int64_t>() - back["tokens_cached"].get<int64_t>());
  EXPECT_EQ(pool->prompt_cache().hits, 1u);
  resp = roundtrip(port, request("GET", "/slots", ""));
  EXPECT_EQ(body_json(resp)[0]["params"]["lora"], (nlohmann::json::array({{{"id", 0}, {"scale", 0.25}}})));
  EXPECT_GT(body_json(resp)[0]["n_cached"].get<int64_t>(), 4);
  resp = roundtrip(port, request("GET", "/props", ""));
  EXPECT_EQ(body_json(resp)["lora_adapters"][0]["path"], files->adapter);
  EXPECT_EQ(body_json(resp)["default_generation_settings"]["params"]["lora"][0]["scale"], 1.0);
  EXPECT_EQ(body_json(resp)["cache_ram_bytes"], 8 << 20);
  resp = roundtrip(port, request("POST", "/slots/0?action=save", R"({"filename": "h.bin"})"));
  EXPECT_EQ(status_of(resp), 200);
  EXPECT_GT(body_json(resp)["n_saved"].get<int64_t>(), 4);
  resp = roundtrip(port, request("POST", "/slots/0?action=restore", R"({"filename": "../h.bin"})"));
  EXPECT_EQ(status_of(resp), 400);
  EXPECT_EQ(body_json(resp)["error"]["param"], "filename");
  resp = roundtrip(port, request("POST", "/slots/0?action=restore", R"({"filename": "h.bin"})"));
  EXPECT_EQ(status_of(resp), 200);
  resp = roundtrip(port, request("POST", "/slots/0?action=erase", ""));
  EXPECT_EQ(status_of(resp), 200);
  EXPECT_GT(body_json(resp)["n_erased"].get<int64_t>(), 4);
  EXPECT_EQ(status_of(roundtrip(port, request("GET", "/slots/0?action=save", ""))), 405);
  resp = roundtrip(port, request("GET", "/metrics", ""));
  EXPECT_NE(resp.find("anelab_prompt_store_capacity_bytes 8388608"), std::string::npos);
  EXPECT_NE(resp.find("anelab_prompt_store_bytes "), std::string::npos);
  EXPECT_NE(resp.find("anelab_prompt_store_hits_total "), std::string::npos);
  srv.stop();
  th.join();
}

}  // namespace
}  // namespace anelab::serve
