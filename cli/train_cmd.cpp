// anelab train: the trainer CLI (train/trainer.h). Options are declared once in train/config.cpp's
// table; --config loads an experiment TOML, explicit flags override it. `anelab train --bench` (and
// `anelab bench train` when the bench command exists) times a Stories110M step (B=1, T=256) against a
// PyTorch fp32 step measured in the same run (scripts/bench_train_torch.py).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "framework/core/error.h"
#include "framework/core/file.h"
#include "train/bench.h"
#include "train/config.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace anelab::cli {
namespace {

struct TrainArgs {
  std::vector<train::FlagSlot> slots;
  bool bench = false;
  int bench_steps = 3;
  int threads = kDefaultThreads;  // sizes the process-wide pool (cli/options.h size_process_pool)
};

train::TrainConfig resolve(const TrainArgs& a) {
  train::TrainConfig c;
  for (const auto& s : a.slots)
    if (s.key == "config" && s.opt->count() > 0) train::apply_toml_file(c, s.value);
  train::apply_flags(c, a.slots);
  train::resolve_names(c);
  if (c.resume_or_start && std::filesystem::exists(std::filesystem::path(c.run_dir) / "last.ckpt")) c.resume = true;
  if (c.resume) {  // the saved config is the base; explicit flags still override
    namespace fs = std::filesystem;
    const std::string path = (fs::path(c.run_dir) / "config.json").string();
    if (!fs::exists(fs::path(c.run_dir) / "last.ckpt")) {  // before the first checkpoint: nothing to resume
      // ... unless a trainer is at work there (before its first checkpoint): that is the one line to give.
      if (fs::is_directory(c.run_dir)) train::RunDirLock probe(c.run_dir);
      const fs::path toml = fs::path(c.run_dir) / "config.toml";
      fail("train", "--resume: run dir ", c.run_dir,
           " has no checkpoint (last.ckpt) yet, so there is nothing to resume; ",
           fs::exists(toml) ? "start it again with `anelab train --config " + toml.string() + "`"
                            : std::string("start it with the same command without --resume"),
           " (or add --resume-or-start, which resumes once a checkpoint exists)");
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file_text(path));
    } catch (const nlohmann::json::exception& e) {
      fail("train", path, ": not valid JSON: ", e.what());
    }
    train::TrainConfig r;
    train::apply_json(r, j);
    train::apply_flags(r, a.slots);
    r.resume = true;
    r.run_dir = c.run_dir;
    train::resolve_names(r);
    c = r;
  }
  train::validate(c);
  return c;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train a Llama-family model (CPU reference or ANE kernel strategies)");
  train::register_options(*cmd, &args->slots);
  add_threads_option(cmd, args->threads)->group("Execution");
  cmd->add_flag("--bench", args->bench,
                "benchmark: Stories110M step (B=1, T=256) vs a PyTorch fp32 step measured now, then exit")
      ->group("Benchmark");
  cmd->add_option("--bench-steps", args->bench_steps, "timed steps per side for --bench")
      ->capture_default_str()
      ->group("Benchmark");
  cmd->callback([cmd, args] {
    size_process_pool(*cmd, args->threads);
    if (args->bench) {
      train::BenchOptions o;
      o.steps = args->bench_steps;
      train::TrainConfig c;
      train::apply_flags(c, args->slots);
      o.strategy = c.strategy;
      std::printf("%s", train::bench_train(o).c_str());
      std::printf("%s", estimate_train_note(o.preset, o.strategy, o.seq).c_str());
      return;
    }
    if (train::run_training(resolve(*args)).restart) {  // under MPI: the launcher loop reruns the job with --resume
      std::fflush(nullptr);
      std::exit(train::kRestartExitCode);
    }
  });
  // `anelab bench train` when the bench command is registered (it is added before train in main.cpp).
  for (CLI::App* sub : app.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; })) {
    CLI::App* b = sub->add_subcommand("train", "Stories110M training step (B=1, T=256) vs PyTorch fp32");
    auto steps = std::make_shared<int>(3);
    auto threads = std::make_shared<int>(kDefaultThreads);
    b->add_option("--steps", *steps, "timed steps per side")->capture_default_str();
    add_threads_option(b, *threads);
    b->callback([b, steps, threads] {
      size_process_pool(*b, *threads);
      train::BenchOptions o;
      o.steps = *steps;
      std::printf("%s", train::bench_train(o).c_str());
    });
  }
}

}  // namespace anelab::cli
