// A checkpoint is untrusted input: every single-field edit of the JSON header of a real checkpoint (each leaf
// changed to ±1, ×2, 0, -1, huge, a "NaN" string, another string or type, or removed) is either refused
// with one line "[checkpoint] PATH: ..." or has no effect, on both reading paths: --resume (the trainer)
// and load_any_model. Version-3 files (header checksum) refuse every edit. The same edits in a version-2 or
// version-1 file (no header checksum, still read) are refused or, when the result is a valid checkpoint,
// resume without a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/tensors.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace anelab {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

void leaves(const json& j, const std::string& at, std::vector<std::string>* out) {
  if (j.is_object() && !j.empty())
    for (const auto& [k, v] : j.items()) leaves(v, at + "/" + k, out);
  else if (j.is_array() && !j.empty())
    for (size_t i = 0; i < j.size(); ++i) leaves(j[i], at + "/" + std::to_string(i), out);
  else
    out->push_back(at);
}

// Every single-field edit of h: (what, edited header). Keys of h hold no '/' or '~' (plain pointers).
std::vector<std::pair<std::string, json>> edits(const json& h) {
  std::vector<std::string> ptrs;
  leaves(h, "", &ptrs);
  std::vector<std::pair<std::string, json>> out;
  for (const std::string& ptr : ptrs) {
    const json::json_pointer p(ptr);
    const json& v = h[p];
    std::vector<json> repl;
    if (v.is_number()) {
      const double d = v.get<double>();
      repl = {d + 1, d - 1, d * 2, 0, -1, 1e300, json(INT64_MAX), "NaN", nullptr};
      if (v.is_number_integer())
        repl.insert(repl.end(), {v.get<int64_t>() + 1, v.get<int64_t>() - 1, v.get<int64_t>() * 2});
    } else if (v.is_string()) {
      repl = {v.get<std::string>() + "x", "", "NaN", 0};
    } else if (v.is_boolean()) {
      repl = {!v.get<bool>(), 1, "true"};
    } else {
      repl = {0, -1, "NaN", json::object()};
    }
    for (const json& r : repl) {
      json f = h;
      f[p] = r;
      out.push_back({ptr + " = " + r.dump(), std::move(f)});
    }
    json f = h;
    json& parent = f[p.parent_pointer()];
    if (parent.is_array())
      parent.erase(std::stoul(p.back()));
    else
      parent.erase(p.back());
    out.push_back({ptr + " removed", std::move(f)});
  }
  return out;
}

// A tiny Llama (the header has the fields of any Llama run; 2 layers of dim 32 keep the checkpoint at ~100 KB, so
// the thousands of edited files below cost I/O of megabytes, not gigabytes).
models::ModelConfig tiny_llama() {
  models::ModelConfig m;
  m.arch = "llama";
  m.dim = 32, m.hidden_dim = 64, m.n_layers = 2, m.n_heads = 2, m.n_kv_heads = 2, m.head_dim = 16;
  m.vocab_size = 97, m.max_seq_len = 64;
  return m;
}

// `init`: the tiny model's file (written by trained()).
train::TrainConfig run_config(const std::string& dir, const std::string& data, const std::string& init) {
  train::TrainConfig c;
  c.init = init, c.data = data, c.run_dir = dir, c.run = "t";
  c.steps = 2, c.batch_size = 2, c.seq_len = 16, c.accum_steps = 1, c.lr = 1e-3, c.warmup_steps = 1;
  c.loss_scale = "dynamic:256:3", c.eval_every = 0, c.eval_batches = 0;
  train::validate(c);
  return c;
}

// "refused": the call threw anelab::Error with one line that names the file and starts with [checkpoint]
// (or [model]: the model config's own checks, validate_config).
::testing::AssertionResult refused(const std::function<void()>& f, const std::string& path) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.find('\n') != std::string::npos || (m.rfind("[checkpoint] ", 0) != 0 && m.rfind("[model] ", 0) != 0) ||
        m.find(path) == std::string::npos)
      return ::testing::AssertionFailure() << "error is not one [checkpoint]/[model] line naming the file: " << m;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "accepted";
}

// Plain write (no fsync: thousands of files).
void put_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

struct Fixture {
  std::string dir, data, init;
  std::vector<uint8_t> good;
  test::CheckpointBytes l;
  json header;
};

Fixture trained(const std::string& tag) {
  Fixture f;
  f.dir = test::temp_dir(tag).string();
  const models::ModelConfig m = tiny_llama();
  f.init = f.dir + "/init.anelab";
  models::write_random_model(m, f.init, 5);
  f.data = test::write_tokens(f.dir, 3000, m.vocab_size, 11);
  train::run_training(run_config(f.dir + "/run", f.data, f.init), {false, false});
  f.good = read_file_bytes(f.dir + "/run/last.ckpt");
  f.l = test::split_checkpoint(f.good);
  f.header = json::parse(f.l.header);
  return f;
}

TEST(CheckpointEdits, EveryHeaderEditIsRefusedOrHasNoEffect) {
  const Fixture f = trained("ckpt_edits");
  EXPECT_EQ(f.l.version, 3u) << "the writer writes version 3 (header checksum)";
  const uint64_t sum = f.l.header_sum;
  const std::string run = f.dir + "/edit", ck = run + "/last.ckpt";
  fs::create_directories(run);
  auto cfg = run_config(run, f.data, f.init);
  cfg.resume = true, cfg.steps = 3;
  int n = 0;
  for (const auto& [what, h] : edits(f.header)) {
    const std::string text = h.dump();
    if (text == f.l.header) continue;  // an edit that changes nothing
    const auto bytes = test::join_checkpoint(f.l.version, text, f.l.data, sum);
    put_bytes(ck, bytes);
    EXPECT_TRUE(refused([&] { train::read_checkpoint(ck); }, ck)) << what;
    EXPECT_TRUE(refused([&] { models::load_any_model(ck); }, ck)) << what;
    EXPECT_TRUE(refused([&] { train::run_training(cfg, {false, false}); }, ck)) << what;
    ++n;
  }
  EXPECT_GT(n, 1000);
  std::printf("%d header edits refused on both paths\n", n);
  fs::remove_all(f.dir);
}

// Versions 1 and 2 (no header checksum; version 1 has no tensors list either): an edit is refused unless it
// leaves a valid checkpoint; a valid one holds the original arrays, loads as a complete model and resumes
// one step without a crash (or is refused by the trainer with one line).
void sweep_legacy(uint32_t version) {
  const Fixture f = trained("ckpt_edits_v" + std::to_string(version));
  json hv = f.header;
  hv["version"] = version;
  if (version == 1) hv.erase("tensors");
  const std::string run = f.dir + "/edit", ck = run + "/last.ckpt";
  fs::create_directories(run);
  put_bytes(ck, test::join_checkpoint(version, hv.dump(), f.l.data));
  const auto base = train::read_checkpoint(ck);  // still read, to the same state
  const auto cur = train::read_checkpoint(f.dir + "/run/last.ckpt");
  EXPECT_TRUE(base.weights == cur.weights && base.m == cur.m && base.v == cur.v && base.step == cur.step);
  int accepted = 0, resumed = 0, total = 0;
  for (const auto& [what, h] : edits(hv)) {
    const std::string text = h.dump();
    if (text == hv.dump()) continue;
    ++total;
    const auto bytes = test::join_checkpoint(version, text, f.l.data);
    put_bytes(ck, bytes);
    std::optional<train::CheckpointState> s;
    try {
      s = train::read_checkpoint(ck);
    } catch (const Error& e) {
      EXPECT_TRUE(refused([&] { throw e; }, ck)) << what;
      EXPECT_TRUE(refused([&] { models::load_any_model(ck); }, ck)) << what;
      continue;
    }
    ++accepted;
    EXPECT_EQ(s->weights.size(), size_t(models::parameter_count(s->model))) << what;
    EXPECT_TRUE(s->weights == cur.weights && s->m == cur.m && s->v == cur.v) << what;
    const auto m = models::load_any_model(ck);
    EXPECT_EQ(m.parameter_count(), models::parameter_count(s->model)) << what;
    if (what.rfind("/config/", 0) == 0 || what.rfind("/totals/", 0) == 0) continue;  // not read by --resume
    auto cfg = run_config(run, f.data, f.init);
    cfg.resume = true, cfg.steps = std::min<int64_t>(s->step + 1, int64_t{1} << 40);
    try {
      train::run_training(cfg, {false, false});
      ++resumed;
      for (float w : train::read_checkpoint(ck).weights) ASSERT_TRUE(std::isfinite(w)) << what;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << what << ": " << e.what();
    }
  }
  std::printf("version %u: %d edits, %d accepted as valid checkpoints, %d of them resumed one step\n", version, total,
              accepted, resumed);
  fs::remove_all(f.dir);
}

TEST(CheckpointEdits, EditedVersion2HeadersAreValidatedFieldByField) { sweep_legacy(2); }
TEST(CheckpointEdits, EditedVersion1HeadersAreValidatedFieldByField) { sweep_legacy(1); }

}  // namespace
}  // namespace anelab
