// Checkpoints are models: a few training steps on the repo's tinytales corpus, then the run directory
// is read as a model and exported to every format; each export must give the checkpoint's logits,
// tokenizer and greedy text. Also: output names choose the format (unknown ones refused), version-1
// files of both formats still load, and the checkpoint's tensors list is checked.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "models/arch/tensors.h"
#include "models/formats/checkpoint_file.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/sampler.h"
#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/common/anelab_versions.h"
#include "tests/common/test_data.h"
#include "tests/train/helpers.h"
#include "train/trainer.h"

namespace anelab {
namespace {
namespace fs = std::filesystem;

// Trains stories260k (vocab 512 = the tinytales tokenizer) for a few CPU steps; returns the run dir.
std::string train_tiny(const fs::path& dir) {
  const std::string tok_path = test::source_path("data/tinytales/tokenizer.json");
  const auto tk = tok::load_tokenizer(tok_path);
  const std::string text = read_file_text(test::source_path("data/tinytales/corpus.txt")).substr(0, 20000);
  const std::string data = (dir / "tt.bin").string();
  tok::write_token_file(*tk, text, data, tok_path);
  train::TrainConfig c;
  c.preset = "stories260k", c.data = data, c.tokenizer = tok_path, c.run_dir = (dir / "run").string(), c.run = "t";
  c.strategy = "cpu", c.steps = 4, c.batch_size = 2, c.seq_len = 32, c.lr = 3e-3, c.eval_every = 2, c.eval_batches = 1;
  train::validate(c);
  train::run_training(c, {false, false});
  return c.run_dir;
}

struct Logits {
  std::vector<float> prefill;  // [n, vocab]
  std::vector<float> decode;   // [vocab] of one decode step after the prompt
};

Logits run_logits(const models::Model& m, const std::vector<int32_t>& prompt) {
  infer::EngineOptions eo;
  eo.backend = "cpu", eo.dtype = infer::WType::kF32, eo.threads = 1, eo.quiet = true;
  infer::Engine e(m, eo);
  Logits l;
  e.prefill(prompt, 0, &l.prefill);
  const float* d = e.decode(prompt[0], static_cast<int64_t>(prompt.size()));
  l.decode.assign(d, d + m.config.vocab_size);
  return l;
}

// max |a - b| / max |b|: every export holds the checkpoint's fp32 values (q/k rows at most permuted),
// so only the summation order inside the RoPE'd dot products may differ: a few fp32 roundings
// (u = 6e-8) over head_dim-long sums, far below 1e-5.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / std::max(den, 1e-30);
}

std::string greedy(const models::Model& m, const tok::Tokenizer& tk) {
  infer::EngineOptions eo;
  eo.backend = "cpu", eo.dtype = infer::WType::kF32, eo.threads = 1, eo.quiet = true;
  infer::Engine e(m, eo);
  infer::GenerateOptions go;
  go.max_new_tokens = 24;
  go.sampling.temperature = 0;
  return infer::generate(e, tk, "Once upon a time", go, [](std::string_view) {}).text;
}

// Rewrites an anelab file (version 5) as format version 1 (tests/common/anelab_versions.h).
void make_version_1(const std::string& path) {
  const std::vector<uint8_t> b = test::anelab_as_version(read_file_bytes(path), 1);
  ASSERT_FALSE(b.empty());
  write_file_atomic(path, b.data(), b.size());
}

TEST(Export, CheckpointIsAModelInEveryFormat) {
  const fs::path dir = test::temp_dir("export");
  const std::string run = train_tiny(dir);
  EXPECT_EQ(models::detect_model_format(run), "checkpoint");
  EXPECT_EQ(models::detect_model_format(run + "/last.ckpt"), "checkpoint");
  const models::Model ck = models::load_any_model(run);
  ASSERT_TRUE(ck.vocab.has_value()) << "the run saves its tokenizer (tokenizer.anetok)";
  const auto tk = tok::make_tokenizer(*ck.vocab);
  const std::vector<int32_t> prompt = tk->encode("Once upon a time, Lily found a red hat.");
  ASSERT_GT(prompt.size(), 4u);
  const Logits ref = run_logits(ck, prompt);
  const std::string ref_text = greedy(ck, *tk);

  for (const char* name : {"m.anelab", "m.gguf", "m-hf", "m.bin"}) {
    SCOPED_TRACE(name);
    const std::string out = (dir / name).string();
    models::export_model(ck, out, models::export_format_for(out, ""));
    const models::Model m = models::load_any_model(out);
    EXPECT_EQ(m.config.vocab_size, ck.config.vocab_size);
    const Logits got = run_logits(m, prompt);
    EXPECT_LT(rel_err(got.prefill, ref.prefill), 1e-5);
    EXPECT_LT(rel_err(got.decode, ref.decode), 1e-5);
    if (std::string(name) == "m.bin") {
      EXPECT_FALSE(m.vocab.has_value());  // llama2.c files hold no tokenizer
      EXPECT_EQ(greedy(m, *tk), ref_text);
      continue;
    }
    ASSERT_TRUE(m.vocab.has_value()) << "the tokenizer is embedded / written next to the weights";
    const auto mt = tok::make_tokenizer(*m.vocab);
    EXPECT_EQ(mt->encode("Once upon a time, Lily found a red hat."), prompt);
    EXPECT_EQ(mt->bos_id(), tk->bos_id());
    EXPECT_EQ(mt->eos_id(), tk->eos_id());
    EXPECT_EQ(greedy(m, *mt), ref_text);
  }
  EXPECT_TRUE(fs::exists(dir / "m-hf" / "config.json"));
  EXPECT_TRUE(fs::exists(dir / "m-hf" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "m-hf" / "tokenizer_config.json"));
  fs::remove_all(dir);
}

// Issue 33 item 5: a model trained on stories each preceded by BOS (llama2.c's layout; the vocabulary's EOS
// never occurs in the data) learnt to emit BOS where a story ends. Its exports name that token as EOS, so
// llama.cpp stops there, and `anelab info` says so; for a token file with a sidecar (separator_id) and for
// a flat llama2.c file that starts with BOS.
TEST(Export, EndOfTextIsTheTrainingDataSeparator) {
  ANELAB_REQUIRE_DATA("llama2c/tok512.bin");
  const fs::path dir = test::temp_dir("export_eos");
  const std::string tok_path = test::data_path("llama2c/tok512.bin");
  const auto tk = tok::load_tokenizer(tok_path);
  ASSERT_EQ(tk->bos_id(), 1);
  ASSERT_EQ(tk->eos_id(), 2);
  const std::string text = read_file_text(test::source_path("data/tinytales/corpus.txt")).substr(0, 8000);
  const std::string with_sidecar = (dir / "sep.bin").string();
  ASSERT_EQ(tok::write_token_file(*tk, text, with_sidecar, tok_path).separator_id, 1);
  const std::vector<int32_t> ids = tok::encode_documents(*tk, text, nullptr);
  std::vector<uint16_t> u16(ids.begin(), ids.end());
  const std::string flat = (dir / "flat.bin").string();
  write_file_atomic(flat, u16.data(), u16.size() * 2);
  for (const std::string& data : {with_sidecar, flat}) {
    SCOPED_TRACE(data);
    train::TrainConfig c;
    c.preset = "stories260k", c.data = data, c.tokenizer = tok_path, c.run = "eos";
    c.run_dir = (dir / ("run_" + fs::path(data).stem().string())).string();
    c.strategy = "cpu", c.steps = 1, c.batch_size = 1, c.seq_len = 16, c.eval_every = 0;
    train::validate(c);
    train::run_training(c, {false, false});
    const std::string gguf = c.run_dir + "/m.gguf";
    models::export_model(models::load_any_model(c.run_dir), gguf, models::ExportFormat::kGguf);
    const models::Model m = models::load_any_model(gguf);
    ASSERT_TRUE(m.vocab.has_value());
    EXPECT_EQ(m.vocab->bos_id, 1);
    EXPECT_EQ(m.vocab->eos_id, 1) << "EOS of the export is the data's document separator (BOS)";
    const std::string out = c.run_dir + "/info.txt";
    const std::string cmd = std::string(ANELAB_BINARY_DIR) + "/bin/anelab info " + gguf + " > " + out + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file_text(out);
    EXPECT_NE(read_file_text(out).find("bos 1, eos 1 (= bos: the training documents' separator)"), std::string::npos)
        << read_file_text(out);
  }
  fs::remove_all(dir);
}

// Issue 34 item 8: a Hugging Face export that fails (here: a write past the file-size limit) leaves no
// partial directory and no temporary one; an export over an existing directory replaces its files.
TEST(Export, FailedHuggingFaceExportLeavesNoDirectory) {
  const fs::path dir = test::temp_dir("export_hf_fail");
  const models::Model ck = models::load_any_model(train_tiny(dir));
  const std::string out = (dir / "m-hf").string();
  const pid_t p = ::fork();
  if (p == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{64 * 1024, 64 * 1024};  // model.safetensors of stories260k is ~1 MiB
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(3);
    try {
      models::export_model(ck, out, models::ExportFormat::kSafetensors);
    } catch (const Error&) {
      ::_exit(0);
    }
    ::_exit(2);
  }
  int st = 0;
  ::waitpid(p, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the export did not fail as set up: " << st;
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().rfind("m-hf", 0), std::string::npos) << e.path();
  models::export_model(ck, out + "/", models::ExportFormat::kSafetensors);
  models::export_model(ck, out, models::ExportFormat::kSafetensors);  // over the existing directory
  EXPECT_TRUE(fs::exists(dir / "m-hf" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "m-hf" / "tokenizer.json"));
  EXPECT_EQ(models::load_any_model(out).config.dim, ck.config.dim);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  fs::remove_all(dir);
}

TEST(Export, OutputNameChoosesTheFormatAndUnknownNamesAreRefused) {
  using models::ExportFormat;
  EXPECT_EQ(models::export_format_for("a/x.anelab", ""), ExportFormat::kAnelab);
  EXPECT_EQ(models::export_format_for("x.gguf", ""), ExportFormat::kGguf);
  EXPECT_EQ(models::export_format_for("x.bin", ""), ExportFormat::kLlama2c);
  EXPECT_EQ(models::export_format_for("out/tiny-hf", ""), ExportFormat::kSafetensors);
  EXPECT_EQ(models::export_format_for("x.bin", "gguf"), ExportFormat::kGguf);
  EXPECT_EQ(models::export_format_for("x.weird", "hf"), ExportFormat::kSafetensors);
  for (const char* bad : {"x.safetensors", "x.pt", "x.txt"}) {
    try {
      models::export_format_for(bad, "");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(models::export_format_for("x.gguf", "onnx"), Error);
}

TEST(Export, VersionOneFilesStillLoadAndTheTensorsListIsChecked) {
  const fs::path dir = test::temp_dir("export_v1");
  const std::string run = train_tiny(dir);
  const models::Model ck = models::load_any_model(run);
  // anelab file version 1 (no chat template field) is still read, tokenizer included.
  const std::string af = (dir / "m.anelab").string();
  models::save_model(ck, af);
  make_version_1(af);
  const models::Model a = models::load_any_model(af);
  EXPECT_TRUE(a.vocab.has_value());
  EXPECT_EQ(a.tensor("layers.0.wq").to_f32(), ck.tensor("layers.0.wq").to_f32());
  // checkpoint version 1 (no tensors list, no header checksum) is still read.
  const test::CheckpointBytes cb = test::split_checkpoint(read_file_bytes(run + "/last.ckpt"));
  nlohmann::json h1 = nlohmann::json::parse(cb.header);
  h1["version"] = 1;
  h1.erase("tensors");
  const std::string c1 = (dir / "v1.ckpt").string();
  const auto v1 = test::join_checkpoint(1, h1.dump(), cb.data);
  write_file_atomic(c1, v1.data(), v1.size());
  EXPECT_EQ(models::read_checkpoint_model(c1, models::canonical_tensors).tensor("norm").to_f32(),
            ck.tensor("norm").to_f32());
  // a tensors list that does not match the model (header checksum valid) is an error naming the entry.
  std::string h = cb.header;
  const size_t at = h.find("\"tok_embeddings\"");
  ASSERT_NE(at, std::string::npos);
  h[at + 1] = 'T';
  const std::string bad = (dir / "bad.ckpt").string();
  const auto b = test::join_checkpoint(3, h, cb.data);
  write_file_atomic(bad, b.data(), b.size());
  try {
    models::read_checkpoint_model(bad, models::canonical_tensors);
    ADD_FAILURE() << "a wrong tensors list was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensors[0]"), std::string::npos) << e.what();
  }
  // A directory without checkpoints is not a run directory.
  EXPECT_THROW(models::read_checkpoint_model(dir.string(), models::canonical_tensors), Error);
  fs::remove_all(dir);
}

// anelab's Hugging Face export read by transformers (tests/fixtures/export/make_export_fixture.py records
// its logits, tokenization and greedy continuation): the export of random stories260k weights (seed 7)
// with the tinytales tokenizer must give the same numbers in anelab.
TEST(Export, HuggingFaceExportMatchesTransformers) {
  const std::string fixture = test::source_path("tests/fixtures/export/reference.json");
  if (!fs::exists(fixture))
    GTEST_SKIP() << fixture << " missing: run tests/fixtures/export/make_export_fixture.py where transformers is";
  const auto ref = nlohmann::json::parse(read_file_text(fixture));
  const fs::path dir = test::temp_dir("export_hf");
  models::Model src = models::random_model(models::preset("stories260k"), 7);
  src.vocab = tok::load_vocab_file(test::source_path("data/tinytales/tokenizer.json"));
  const std::string out = (dir / "r-hf").string();
  models::export_model(src, out, models::ExportFormat::kSafetensors);
  const models::Model m = models::load_any_model(out);
  ASSERT_TRUE(m.vocab.has_value());
  const auto tk = tok::make_tokenizer(*m.vocab);
  EXPECT_EQ(tk->encode(ref.at("prompt_text").get<std::string>()), ref.at("prompt_ids").get<std::vector<int32_t>>());
  for (size_t p = 0; p < ref.at("prompts").size(); ++p) {
    const auto prompt = ref["prompts"][p].get<std::vector<int32_t>>();
    std::vector<float> want;
    for (const auto& row : ref["logits"][p])
      for (const auto& x : row) want.push_back(x.get<float>());
    // transformers (eager fp32) and anelab (fp32) differ in summation order only: ~sqrt(dim) fp32 roundings
    // of the logits' magnitude, and the fixture keeps 7 significant digits.
    EXPECT_LT(rel_err(run_logits(m, prompt).prefill, want), 1e-5) << "prompt " << p;
  }
  infer::EngineOptions eo;
  eo.backend = "cpu", eo.dtype = infer::WType::kF32, eo.threads = 1, eo.quiet = true;
  infer::Engine e(m, eo);
  auto ids = ref["prompts"][0].get<std::vector<int32_t>>();
  const float* lg = e.prefill(ids, 0);
  std::vector<int32_t> got;
  for (size_t i = 0; i < ref.at("greedy").size(); ++i) {
    got.push_back(models::argmax(std::span<const float>(lg, static_cast<size_t>(m.config.vocab_size))));
    lg = e.decode(got.back(), static_cast<int64_t>(ids.size() + i));
  }
  EXPECT_EQ(got, ref["greedy"].get<std::vector<int32_t>>());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anelab
