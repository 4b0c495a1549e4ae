#include "cli/demo_loop.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dashboard/gui.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "infer/load.h"
#include "models/io/export.h"
#include "models/io/load_any.h"
#include "models/tokenizer/token_file.h"
#include "models/tokenizer/tokenizer.h"
#include "train/config.h"
#include "train/trainer.h"

namespace anelab::cli {
namespace {
namespace fs = std::filesystem;
constexpr char kMarker[] = "demo.json";  // marks a directory this command made (and may replace)

// data/tinytales of the checkout this executable was built in (build/bin/anelab), else of the cwd.
std::string find_data(const std::string& given) {
  if (!given.empty()) return given;
  std::vector<fs::path> tried;
  if (const auto exe = platform::executable_path(); exe.value)
    tried.push_back(fs::path(*exe.value).parent_path() / ".." / ".." / "data" / "tinytales");
  tried.push_back(fs::path("data") / "tinytales");
  for (const fs::path& p : tried)
    if (fs::exists(p / "corpus.txt")) return p.lexically_normal().string();
  fail("demo",
       "data/tinytales (corpus.txt + tokenizer.json) not found next to the executable's checkout or in the "
       "current directory; pass --data DIR");
}

void prepare_out(const std::string& out) {
  if (fs::exists(out)) {
    if (!fs::exists(fs::path(out) / kMarker))
      fail("demo", out, " exists and was not made by `anelab demo` (no ", kMarker, "); pass another --out");
    fs::remove_all(out);
  }
  fs::create_directories(out);
  write_file_atomic((fs::path(out) / kMarker).string(), "{\"made_by\": \"anelab demo\"}\n");
}

// Loss of the first and the last step event of a run (events.jsonl).
std::pair<double, double> loss_range(const std::string& run_dir) {
  std::ifstream f(fs::path(run_dir) / "events.jsonl");
  std::string line;
  double first = 0, last = 0;
  bool seen = false;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || j.value("event", "") != "step" || !j.contains("loss") || !j["loss"].is_number()) continue;
    last = j["loss"].get<double>();
    if (!seen) first = last, seen = true;
  }
  return {first, last};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `s` as one shell word: as it is when it needs no quoting, else in single quotes.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                       "0123456789_./:=+-,@%") == std::string::npos;
  if (plain) return s;
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The "Next:" lines: each one a complete command (run verbatim by tests/acceptance/demo_next.py), so a
// user can paste it. The longer run keeps the demo's learning rate, batch, warmup share and weight decay,
// writes last.ckpt as it goes, and lives in its own run directory; --resume-or-start makes the same command
// continue it after a stop (and do nothing once it finished).
void print_next_steps(const DemoLoopOptions& o, const train::TrainConfig& c, const std::string& tokens,
                      const std::string& tok_path, const std::string& ex, double seconds) {
  const std::string self = shell_word(platform::executable_path().value.value_or("anelab"));
  const std::string p = shell_word(o.prompt), run = shell_word(c.run_dir);
  auto in_ex = [&](const char* name) { return shell_word((fs::path(ex) / name).string()); };
  std::printf("\ndone in %.0f s. Next:\n", seconds);
  std::printf("  %s infer generate --model %s --prompt %s --temp 0.8\n", self.c_str(), run.c_str(), p.c_str());
  std::printf("  %s infer generate --model %s --prompt %s --temp 0\n", self.c_str(), in_ex("tinytales.gguf").c_str(),
              p.c_str());
  std::printf("  %s infer generate --model %s --tokenizer %s --prompt %s --temp 0\n", self.c_str(),
              in_ex("tinytales.bin").c_str(), shell_word(tok_path).c_str(), p.c_str());
  std::printf("  %s serve --model %s\n", self.c_str(), in_ex("tinytales.anelab").c_str());
  if (dashboard::gui_available()) std::printf("  %s dashboard %s\n", self.c_str(), run.c_str());
  const int64_t steps = 5 * c.steps;
  std::printf(
      "  %s train --preset %s --data %s --strategy %s --steps %lld --batch-size %lld --seq-len %lld --lr %g "
      "--warmup-steps %lld --weight-decay %g --checkpoint-every %lld --run-dir %s --resume-or-start   # longer: "
      "docs/training.md\n",
      self.c_str(), shell_word(o.preset).c_str(), shell_word(tokens).c_str(), shell_word(o.strategy).c_str(),
      static_cast<long long>(steps), static_cast<long long>(c.batch_size), static_cast<long long>(c.seq_len), c.lr,
      static_cast<long long>(std::max<int64_t>(1, steps / 20)), c.weight_decay,
      static_cast<long long>(std::max<int64_t>(1, steps / 10)),
      shell_word((fs::path(o.out) / "longer").string()).c_str());
  std::printf("(the Hugging Face directory %s/tinytales-hf loads with transformers' AutoModelForCausalLM)\n",
              ex.c_str());
}

}  // namespace

void run_demo_loop(const DemoLoopOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string data = find_data(o.data);
  const std::string tok_path = (fs::path(data) / "tokenizer.json").string();
  const fs::path out(o.out);
  prepare_out(o.out);
  std::printf(
      "anelab demo: train a tiny Llama from scratch on the ANE training kernels (%s backend, %s strategy), "
      "generate from it, export it.\n\n",
      o.backend.c_str(), o.strategy.c_str());

  // 1. tokenize
  const auto tok = tok::load_tokenizer(tok_path);
  const std::string tokens = (out / "tinytales.bin").string();
  const auto info = tok::write_token_file(*tok, read_file_text((fs::path(data) / "corpus.txt").string()), tokens,
                                          fs::absolute(tok_path).lexically_normal().string());
  std::printf("[1/4] tokenize %s/corpus.txt with %s: %lld stories -> %lld tokens (%s)\n\n", data.c_str(),
              tok->describe().c_str(), static_cast<long long>(info.n_documents), static_cast<long long>(info.n_tokens),
              tokens.c_str());

  // 2. train
  train::TrainConfig c;
  c.preset = o.preset;
  c.data = tokens;
  c.tokenizer = tok_path;
  c.run = "demo";
  c.run_dir = (out / "run").string();
  c.strategy = o.strategy;
  c.backend = o.backend;
  c.device = o.device;
  c.steps = o.steps;
  c.batch_size = o.batch_size;
  c.seq_len = o.seq_len;
  c.lr = o.lr;
  c.warmup_steps = std::max<int64_t>(1, o.steps / 20);
  c.weight_decay = 0.0;
  c.eval_every = std::max<int64_t>(1, o.steps / 3);
  c.eval_batches = 4;
  train::resolve_names(c);
  train::validate(c);
  std::printf("[2/4] train %s (%s) for %lld steps, batch %lld x %lld tokens, lr %g; run dir %s\n", o.preset.c_str(),
              o.strategy.c_str(), static_cast<long long>(c.steps), static_cast<long long>(c.batch_size),
              static_cast<long long>(c.seq_len), c.lr, c.run_dir.c_str());
  std::fflush(stdout);
  train::RunHooks hooks;
  hooks.allow_exec_restart = false;  // re-running `anelab demo` would start over; the dynamic strategy compiles once
  const train::TrainOutcome r = train::run_training(c, hooks);
  const auto [first, last] = loss_range(c.run_dir);
  std::printf("loss %.3f -> %.3f over %lld steps", first, last, static_cast<long long>(r.steps));
  if (r.best_val_loss) std::printf(" (best validation loss %.3f)", *r.best_val_loss);
  std::printf("\n\n");

  // 3. generate from the run directory (= its best checkpoint)
  std::printf("[3/4] generate from %s (greedy, prompt \"%s\"):\n", c.run_dir.c_str(), o.prompt.c_str());
  infer::LoadOptions lo;
  lo.model = c.run_dir;
  lo.backend = o.backend;
  lo.threads = o.threads;
  if (!o.device.empty()) lo.device = o.device;
  lo.component = "demo";
  infer::LoadedModel loaded = infer::load_model(lo, infer::TokenizerUse::kRequired);
  infer::Engine engine(loaded.model, loaded.engine);
  const tok::Tokenizer& gtok = *loaded.tokenizer;
  infer::GenerateOptions go;
  go.max_new_tokens = o.sample_tokens;
  go.sampling.temperature = 0;
  const auto g = infer::generate(engine, gtok, o.prompt, go, [](std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");

  // 4. export the run as read from disk, tokenizer included (load_model above keeps none in its model)
  const models::Model m = models::load_any_model(c.run_dir);
  const fs::path ex = out / "exports";
  fs::create_directories(ex);
  std::printf("[4/4] export %s:\n", c.run_dir.c_str());
  for (const char* name : {"tinytales.anelab", "tinytales.gguf", "tinytales-hf", "tinytales.bin"}) {
    const std::string p = (ex / name).string();
    const auto f = models::export_format_for(p, "");
    models::export_model(m, p, f);
    std::printf("  %-12s %s\n", models::export_format_name(f), p.c_str());
  }
  print_next_steps(o, c, tokens, tok_path, ex.string(), seconds_since(t0));
  (void)g;
}

}  // namespace anelab::cli
