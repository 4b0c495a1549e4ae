#include "train/trainer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/core/platform.h"
#include "framework/runtime/backend.h"
#include "models/formats/checkpoint_file.h"
#include "models/formats/model_config_json.h"
#include "models/io/load_any.h"
#include "models/presets.h"
#include "models/sampler.h"
#include "models/tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/dist.h"
#include "train/dist_overlap.h"
#include "train/engine.h"
#include "train/events.h"
#include "train/kernel_engine.h"
#include "train/lora_run.h"
#include "train/optim.h"
#include "train/run_dir.h"

namespace anelab::train {
namespace {

namespace fs = std::filesystem;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The tokenizer a token file was made with (its sidecar OUT.bin.json names it), when that file exists.
std::string data_tokenizer(const std::string& data) {
  const fs::path side = data + ".json";
  if (!fs::exists(side)) return "";
  const auto j = nlohmann::json::parse(read_file_text(side.string()), nullptr, false);
  if (!j.is_object() || !j.contains("tokenizer") || !j["tokenizer"].is_string()) return "";
  const std::string t = j["tokenizer"].get<std::string>();
  return !t.empty() && fs::exists(t) ? t : "";
}

// Set (to "step N") in the environment of a process exec-restarted after a compile failure, until its
// first step completes: a compile failure before then is a real error, not a reason for another restart.
constexpr const char* kCompileRestartEnv = "ANELAB_RESTARTED_AFTER_COMPILE_FAILURE";

// Thrown (under an MPI launcher) where a single process would exec() itself: every rank has passed a barrier
// after rank 0 wrote last.ckpt; run_training returns TrainOutcome::restart. Not a std::exception on purpose.
struct RestartForLauncher {};

uint32_t fnv1a32(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : s) h = (h ^ ch) * 16777619u;
  return h;
}

// Everything one training process holds. Member functions are the loop's named steps.
struct Run {
  std::unique_ptr<dist::Group> group;  // data-parallel ranks (first member: destroyed last)
  TrainConfig cfg;
  RunHooks hooks;
  ParamLayout layout;
  std::vector<float> w, g;                   // [P] master weights, gradients (--lora: the adapters' [PA])
  std::unique_ptr<LoraLayout> lora;          // --lora: the adapters (w, g, the optimizer's moments)
  std::unique_ptr<FrozenBase> lora_base;     // --lora: the frozen base until the engine takes it
  LoraEngine* lora_engine = nullptr;         // --lora: the engine, which holds the base
  std::vector<float> gm;                     // [P] one micro-batch's gradients (empty: one micro-batch per step)
  std::unique_ptr<dist::OverlappedSum> sum;  // g += gm over the ranks (with gm; destroyed after the engine)
  std::unique_ptr<AdamW> opt;
  LossScaler scaler;
  ScheduleConfig sched;
  std::unique_ptr<TokenData> data;
  std::unique_ptr<Batcher> batcher;
  std::unique_ptr<StepEngine> engine;
  std::unique_ptr<CpuModel> eval_model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  RunDirLock lock;  // rank 0: DIR/run.lock, held until the process ends (or this run does)
  std::unique_ptr<EventLog> events;
  std::unique_ptr<power::Meter> meter;  // step energy; meter->available() false: "not available"
  std::string power_reason;             // why there is no energy (no source, or a read that failed)
  double energy_j = 0;                  // this process's steps
  int64_t energy_tokens = 0;
  std::string model_label;
  std::string tokenizer_from;  // where `tokenizer` came from ("--tokenizer X", "--init X", ...)
  int64_t step = 0, restarts = 0, tokens = 0, steps_here = 0, prior_compiles = 0;
  std::optional<double> best_val, last_val;
  double prior_wall = 0, prior_compile = 0, prior_train = 0;
  double t_start = now_s(), compile_s = 0, train_s = 0, last_loss = 0;
  double t_loop = 0;              // when this process's first step started (ETA basis)
  bool already_finished = false;  // --resume of a run at --steps: setup() stopped before writing

  std::string ckpt_path(const char* kind) const {
    return (fs::path(cfg.run_dir) / (std::string(kind) + ".ckpt")).string();
  }
  bool root() const { return group->rank() == 0; }
  void emit(const std::string& ev, nlohmann::json f) {  // rank 0 only: the others have no event log
    if (!events) return;
    const auto e = events->emit(ev, step, std::move(f));
    if (hooks.console && !cfg.quiet) {
      const bool tty = platform::is_terminal(1);
      if (ev == "step" && !tty && step % 10 != 0 && step != 1 && step != cfg.steps) return;
      const std::string line = console_line(e, cfg.steps);
      if (!line.empty()) std::printf("%s\n", line.c_str()), std::fflush(stdout);
    }
  }

  void load_model(bool resume, CheckpointState* ck);
  void setup_lora(bool resume, std::vector<float>* m, std::vector<float>* v);
  std::vector<float> model_weights() const;
  void setup();
  void emit_start(bool resumed);
  void emit_memory();
  void check_same_setup();
  void check_data_vocabulary() const;
  tok::VocabData run_vocab() const;
  void check_same_weights();
  Batch next_batch();
  void micro_batch(const Batch& b, float scale, uint64_t data_state, StepTimes* st, double* loss_sum,
                   double ms_comm[2]);
  void train_step();
  std::optional<power::Reading> energy_now();
  nlohmann::json power_json() const;
  void add_step_energy(const std::optional<power::Reading>& e0, int64_t ntok, nlohmann::json* f);
  void maybe_restart();
  [[noreturn]] void restart_after_compile_failure(const std::string& code, const std::string& message,
                                                  uint64_t data_state);
  double evaluate();
  void sample();
  void checkpoint(bool best);
  CheckpointState make_state() const;
  [[noreturn]] void exec_restart();
  TrainOutcome finish(bool finished);
};

void Run::load_model(bool resume, CheckpointState* ck) {
  std::optional<models::Model> m;
  if (resume) *ck = read_checkpoint(ckpt_path("last"));
  if (resume && !cfg.lora) {  // (a LoRA run's checkpoint holds the merged model: the base is loaded again below)
    layout = ParamLayout(ck->model);
    w = std::move(ck->weights);
  } else if (!cfg.preset.empty()) {
    models::ModelConfig mc = models::preset_with_shape(cfg.preset, cfg.shape, "train");
    layout = ParamLayout(mc);
    w = init_random(layout, uint64_t(cfg.seed));
  } else {
    m = models::load_any_model(cfg.init);
    layout = ParamLayout(m->config);
    if (cfg.lora && cfg.strategy == "cpu")  // the base in the file's types (QLoRA for a quantized file)
      lora_base = std::make_unique<FrozenBase>(layout, *m);
    else
      w = init_from_model(layout, *m);
  }
  model_label = !cfg.preset.empty() ? cfg.preset : fs::path(cfg.init).filename().string();
  const fs::path saved_tok = fs::path(cfg.run_dir) / models::kRunTokenizerFile;
  if (!cfg.tokenizer.empty())
    tokenizer = tok::load_tokenizer(cfg.tokenizer), tokenizer_from = "--tokenizer " + cfg.tokenizer;
  else if (m && m->vocab)
    tokenizer = tok::make_tokenizer(*m->vocab), tokenizer_from = "--init " + cfg.init;
  else if (resume && fs::exists(saved_tok))
    tokenizer = tok::make_tokenizer(models::read_run_tokenizer(saved_tok.string())),
    tokenizer_from = saved_tok.string();
  else if (const std::string t = data_tokenizer(cfg.data); !t.empty())
    tokenizer = tok::load_tokenizer(t), tokenizer_from = t;
  if (cfg.seq_len > layout.config().max_seq_len)
    fail("train", "--seq-len ", cfg.seq_len, " exceeds the model's context length ", layout.config().max_seq_len);
}

// --lora: the base (as load_model left it: the file's tensors, or w in fp32) becomes the engine's frozen base, w the
// adapters: fresh (lora_init) or, on resume, RUN_DIR/last.lora with the optimizer's moments into *m, *v.
void Run::setup_lora(bool resume, std::vector<float>* m, std::vector<float>* v) {
  LoraConfig lc;
  lc.rank = cfg.lora_rank, lc.alpha = cfg.lora_alpha, lc.dropout = cfg.lora_dropout;
  lc.targets = parse_lora_targets(cfg.lora_targets);
  lora = std::make_unique<LoraLayout>(layout.config(), lc);
  if (!lora_base) lora_base = std::make_unique<FrozenBase>(layout, std::move(w));
  w.clear();
  if (resume)
    read_lora_state((fs::path(cfg.run_dir) / "last.lora").string(), *lora, &w, m, v);
  else
    w = lora_init(*lora, uint64_t(cfg.seed));
}

// The model's weights [P]: w, or with --lora the base with the adapters merged (W + alpha/r * B·A, fp32).
std::vector<float> Run::model_weights() const {
  if (!lora) return w;
  std::vector<float> m = lora_engine->base().to_f32();
  lora_merge(layout, *lora, w.data(), float(lora->lora().scale()), m.data());
  return m;
}

// Loads and checks everything first and creates the run dir last, so a failed start leaves nothing
// behind; a --resume of a finished run stops before anything is written.
void Run::setup() {
  if (root() && !cfg.resume) check_fresh_run_dir(cfg.run_dir, cfg.force);       // before run.lock is made there
  if (root() && fs::is_directory(cfg.run_dir)) lock = RunDirLock(cfg.run_dir);  // one writer (train/run_dir.h)
  if (!cfg.resume && fs::exists(ckpt_path("last")))
    fail("train", "run dir ", cfg.run_dir,
         " already holds last.ckpt: pass --resume to continue it, or choose another --run-dir");
  if (root() && fs::is_directory(cfg.run_dir)) remove_stale_temp_files(cfg.run_dir);  // of writers killed mid-write
  CheckpointState ck;
  load_model(cfg.resume, &ck);
  if (cfg.lora) setup_lora(cfg.resume, &ck.m, &ck.v);
  if (cfg.resume && ck.step >= cfg.steps) {
    step = ck.step, best_val = ck.best_val_loss;
    already_finished = true;
    return;
  }
  g.assign(w.size(), 0.0f);
  const AdamWConfig ac{cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay};
  opt = lora ? std::make_unique<AdamW>(lora->params(), lora->total(), ac) : std::make_unique<AdamW>(layout, ac);
  scaler = LossScaler::parse(cfg.loss_scale);
  sched = ScheduleConfig{cfg.lr, cfg.min_lr_frac, cfg.warmup_steps, cfg.steps, cfg.schedule == "cosine"};
  if (cfg.data.ends_with(".jsonl")) {  // MLX-LM's forms, with the model's tokenizer and chat template
    const tok::ChatTemplate chat = tokenizer ? tok::chat_template_for(*tokenizer, "auto") : tok::ChatTemplate::kNone;
    data = std::make_unique<TokenData>(cfg.data, cfg.val_frac, cfg.seq_len,
                                       JsonlOptions{tokenizer.get(), chat, cfg.mask_prompt});
  } else {
    data = std::make_unique<TokenData>(cfg.data, cfg.val_frac, cfg.seq_len);
  }
  check_data_vocabulary();
  if (data->max_id() >= layout.config().vocab_size)
    fail("train", "data file ", cfg.data, " holds token id ", data->max_id(), " >= the model's vocab_size ",
         layout.config().vocab_size, " (tokenized with a different tokenizer?)");
  batcher = std::make_unique<Batcher>(*data, cfg.batch_size, cfg.seq_len, cfg.batching == "random", uint64_t(cfg.seed));
  if (cfg.resume) {
    if (ck.batching != cfg.batching)
      fail("train", "--batching ", cfg.batching, " differs from the checkpoint's ", ck.batching);
    opt->m() = std::move(ck.m);
    opt->v() = std::move(ck.v);
    opt->set_t(ck.adam_t);
    scaler.dynamic = ck.ls_dynamic, scaler.scale = ck.ls_scale, scaler.interval = int64_t(ck.ls_interval);
    scaler.good_steps = ck.ls_good_steps;
    batcher->set_state(ck.data_state);
    step = ck.step, best_val = ck.best_val_loss, restarts = ck.restarts, tokens = ck.tokens;
    prior_wall = ck.wall_s, prior_compile = ck.compile_s, prior_train = ck.train_s, prior_compiles = ck.compiles;
  }
  if (lora) {
    auto e = std::make_unique<LoraEngine>(layout, std::move(*lora_base), *lora, uint64_t(cfg.seed));
    lora_base.reset();
    e->set_micro_batches(uint64_t(step * cfg.accum_steps));  // the dropout stream where the run left it
    e->set_base_bf16(cfg.lora_compute == "bf16");
    if (cfg.strategy == "static" || cfg.strategy == "dynamic")
      e->set_step_engine(make_kernel_lora_engine(kernel_engine_options(cfg), layout, e->base().dense_data(), *lora,
                                                 uint64_t(cfg.seed), [le = e.get()] { return le->micro_batches(); }));
    lora_engine = e.get();
    engine = std::move(e);
  } else {
    engine = make_engine(cfg, layout);
  }
  if (cfg.accum_steps * group->size() > 1) {
    gm.assign(w.size(), 0.0f);
    const bool overlap = !lora && cfg.comm_overlap == "on" && group->size() > 1 && group->any_thread();
    sum = std::make_unique<dist::OverlappedSum>(
        *group, lora ? std::vector<int64_t>{int64_t(w.size()), 0} : dist::backward_bounds(layout), overlap);
    if (overlap) engine->set_grads_final_hook([s = sum.get()](int64_t from) { s->final_from(from); });
  }
  meter = std::make_unique<power::Meter>(hooks.power ? hooks.power() : power::select_source());
  if (!meter->available()) power_reason = meter->reason();
  check_same_setup();
  if (!root()) return;                               // only rank 0 writes the run dir
  fs::create_directories(cfg.run_dir);               // only now: a start that fails before this leaves nothing behind
  if (!lock.held()) lock = RunDirLock(cfg.run_dir);  // a second start that created it too stops here
  // Saved with the run, so its checkpoints are models that carry their tokenizer (checkpoint_file.h).
  if (tokenizer) models::save_run_tokenizer(run_vocab(), (fs::path(cfg.run_dir) / models::kRunTokenizerFile).string());
  events = std::make_unique<EventLog>((fs::path(cfg.run_dir) / "events.jsonl").string());
  const nlohmann::json cj = to_json(cfg);
  write_file_atomic((fs::path(cfg.run_dir) / "config.json").string(), cj.dump(2) + "\n");
  write_file_atomic((fs::path(cfg.run_dir) / "config.toml").string(), to_toml(cfg));
}

// The tokenizer saved with the run: its EOS is the token that separated the training documents (the model
// learnt to emit it where a text ends; llama.cpp stops at EOS, and a BOS-separated corpus never shows the
// vocabulary's own EOS). The separator is the sidecar's separator_id, or BOS for a flat llama2.c file that
// starts with BOS (llama2.c's pretokenizer puts one before every story).
tok::VocabData Run::run_vocab() const {
  tok::VocabData v = tokenizer->vocab();
  int32_t sep = data->source().separator_id;
  if (data->format() == "uint16-flat" && data->n_tokens() > 0 && data->tokens()[0] == v.bos_id) sep = v.bos_id;
  if (sep >= 0 && sep < static_cast<int32_t>(v.tokens.size())) v.eos_id = sep;
  return v;
}

// Data made by another tokenizer than the model's trains without error but learns nothing useful: the
// token file's sidecar names the tokenizer that made it, which must fit the model's vocab_size (the rule
// of tok::vocab_fits) and match the tokenizer of --init / --tokenizer token for token in size.
void Run::check_data_vocabulary() const {
  const tok::TokenFileSource& s = data->source();
  if (s.vocab_size <= 0) return;  // a flat llama2.c file says nothing; max_id() is checked below
  const std::string made_by =
      cat("data file ", cfg.data, " was made by tokenizer ",
          s.tokenizer.empty() ? std::string("(unnamed)") : s.tokenizer, " (", s.vocab_size, " tokens)");
  const int64_t V = layout.config().vocab_size;
  if (!tok::vocab_fits(s.vocab_size, V))
    fail("train", "vocabulary mismatch: ", made_by, " but model ", model_label, " has vocab_size ", V,
         ": tokenize the data with the model's tokenizer, or train a model of that vocabulary");
  if (tokenizer && tokenizer->vocab_size() != s.vocab_size)
    fail("train", "vocabulary mismatch: ", made_by, " but the tokenizer of ", tokenizer_from, " has ",
         tokenizer->vocab_size(), " tokens");
}

// Every rank must train the same model on the same data with the same options (each parsed its own command
// line): a hash of the resolved config, the parameter count and the data size, compared across ranks.
void Run::check_same_setup() {
  if (group->size() == 1) return;
  const std::string setup = to_json(cfg).dump() + (sum && sum->overlap() ? "overlap" : "");  // the same collectives
  const double mine[3] = {double(fnv1a32(setup)), double(layout.total()), double(data->n_tokens())};
  std::vector<double> all(size_t(3 * group->size()));
  group->allgather(mine, 3, all.data());
  for (int r = 1; r < group->size(); ++r)
    if (!std::equal(all.begin(), all.begin() + 3, all.begin() + 3 * r))
      fail("train", "rank ", r, " differs from rank 0 in its options, model (", int64_t(all[size_t(3 * r + 1)]), " vs ",
           int64_t(all[1]), " parameters) or data (", int64_t(all[size_t(3 * r + 2)]), " vs ", int64_t(all[2]),
           " tokens): every rank needs the same command line, model and data file");
}

// The ranks' weights must stay identical (same sums, same optimizer arithmetic): compared through a 64-bit hash
// of their bits where every rank checkpoints (periodic and final checkpoints), so a rank that computes
// differently (another build or architecture) stops the run instead of training a different model unseen.
void Run::check_same_weights() {
  if (group->size() == 1) return;
  uint64_t h = 14695981039346656037ull;
  for (float x : w) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  const double mine[2] = {double(h >> 32), double(h & 0xffffffffu)};
  std::vector<double> all(size_t(2 * group->size()));
  group->allgather(mine, 2, all.data());
  for (int r = 1; r < group->size(); ++r)
    if (all[size_t(2 * r)] != all[0] || all[size_t(2 * r + 1)] != all[1])
      fail("train", "after step ", step, " the weights of rank ", r,
           " differ from rank 0's: the ranks must run the "
           "same anelab build on the same architecture (last.ckpt holds rank 0's weights)");
}

void Run::emit_start(bool resumed) {
  const auto& c = layout.config();
  const double pid = double(platform::process_id());
  std::vector<double> all(size_t(group->size()));
  group->allgather(&pid, 1, all.data());
  const std::vector<int64_t> pids(all.begin(), all.end());
  nlohmann::json model = models::model_config_to_json(c);
  model.update({{"preset", model_label}, {"seq_len", cfg.seq_len}, {"params", layout.total()}});
  emit("run_start", {{"schema", kEventsSchema},
                     {"run", cfg.run},
                     {"pid", platform::process_id()},
                     {"resumed", resumed},
                     {"ranks", group->size()},
                     {"rank_pids", pids},
                     {"mpi", group->mpi() ? dist::mpi_version() : ""},
                     {"comm_overlap", sum && sum->overlap()},
                     {"restart", restarts},
                     {"config", to_json(cfg)},
                     {"model", model},
                     {"backend", cfg.strategy == "cpu" ? "cpu" : cfg.backend},
                     {"device", cfg.device},
                     {"strategy", cfg.strategy},
                     {"data",
                      {{"path", cfg.data},
                       {"format", data->format()},
                       {"tokens", data->n_tokens()},
                       {"train_tokens", data->n_train()},
                       {"val_tokens", data->n_val()}}},
                     {"power", power_json()}});
  emit_memory();
}

// The bytes of the model's weights file (--init): the file, or the *.safetensors of a Hugging Face directory; -1
// with --preset (no file).
int64_t init_file_bytes(const std::string& init) {
  if (init.empty() || !fs::exists(init)) return -1;
  if (!fs::is_directory(init)) return int64_t(fs::file_size(init));
  int64_t n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(init))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") n += int64_t(e.file_size());
  return n;
}

// What this process holds for training, in bytes, from the buffers themselves: the frozen base (--lora), the
// trained weights (the master weights [P], or the adapters), their gradients (g, and gm with accumulation or
// ranks), AdamW's two moments, and the activations the engine keeps for one micro-batch (its own count,
// StepEngine::activation_bytes: null when it gives none). The peak RSS is in every step and in run_end.
void Run::emit_memory() {
  const int64_t base = lora_engine ? lora_engine->base().held_bytes() : 0;
  const int64_t trained = int64_t(w.size() * sizeof(float));
  const int64_t grads = int64_t((g.size() + gm.size()) * sizeof(float));
  const int64_t moments = int64_t((opt->m().size() + opt->v().size()) * sizeof(float));
  const int64_t acts = engine->activation_bytes(cfg.batch_size, cfg.seq_len);
  const int64_t file = init_file_bytes(cfg.init);
  nlohmann::json f = {{"lora", bool(lora)},
                      {"batch_size", cfg.batch_size},
                      {"seq_len", cfg.seq_len},
                      {"base_bytes", base},
                      {"base_types", lora_engine ? lora_engine->base().types() : ""},
                      {"base_compute", lora_engine ? cfg.lora_compute : ""},
                      {"trained_bytes", trained},
                      {"grad_bytes", grads},
                      {"optimizer_bytes", moments},
                      {"activation_bytes", acts >= 0 ? nlohmann::json(acts) : nlohmann::json(nullptr)},
                      {"total_bytes", base + trained + grads + moments + std::max<int64_t>(acts, 0)},
                      {"file_bytes", file >= 0 ? nlohmann::json(file) : nlohmann::json(nullptr)}};
  add_rss(&f);  // after the activations were sized, before the first step
  add_peak_rss(&f);
  emit("memory", std::move(f));
}

nlohmann::json Run::power_json() const {
  if (!power_reason.empty()) return {{"available", false}, {"reason", power_reason}};
  nlohmann::json rails = nlohmann::json::array();
  for (power::Rail r : meter->rails()) rails.push_back(power::rail_name(r));
  return {{"available", true}, {"source", meter->source_name()}, {"rails", rails}};
}

// Cumulative energy now; nullopt when there is no source (or a read failed: then power_reason says so).
std::optional<power::Reading> Run::energy_now() {
  if (!power_reason.empty()) return std::nullopt;
  try {
    return meter->energy();
  } catch (const std::exception& e) {
    power_reason = std::string("power source failed: ") + e.what();
    return std::nullopt;
  }
}

// energy_j / j_per_token / energy_rails of one step, or null (never 0) with the reason in run_start.power
// (and in energy_error when the source failed during the run).
void Run::add_step_energy(const std::optional<power::Reading>& e0, int64_t ntok, nlohmann::json* f) {
  const std::optional<power::Reading> e1 = e0 ? energy_now() : std::nullopt;
  if (group->size() > 1) {  // the sum over ranks, each measuring its own host (null when one cannot)
    const double mine = e0 && e1 ? power::difference(*e0, *e1).joules.total() : std::nan("");
    std::vector<double> all(size_t(group->size()));
    group->allgather(&mine, 1, all.data());
    double j = 0;
    for (double x : all) j += x;
    (*f)["energy_ranks"] = std::isnan(j) ? nlohmann::json(nullptr) : nlohmann::json(all);
    if (!std::isnan(j)) energy_j += j, energy_tokens += ntok;
    (*f)["energy_j"] = std::isnan(j) ? nlohmann::json(nullptr) : nlohmann::json(j);
    (*f)["j_per_token"] = std::isnan(j) ? nlohmann::json(nullptr) : nlohmann::json(j / double(ntok));
    return;
  }
  if (!e0 || !e1) {
    (*f)["energy_j"] = nullptr, (*f)["j_per_token"] = nullptr;
    if (meter->available()) (*f)["energy_error"] = power_reason;
    return;
  }
  const power::Sample s = power::difference(*e0, *e1);
  nlohmann::json rails = nlohmann::json::object();
  for (power::Rail r : meter->rails()) rails[power::rail_name(r)] = s.joules[r];
  const double j = s.joules.total();
  energy_j += j, energy_tokens += ntok;
  (*f)["energy_j"] = j, (*f)["j_per_token"] = j / double(ntok), (*f)["energy_rails"] = rails;
}

// The next micro-batch of this rank: rank r of N keeps micro-batch r of every N drawn (the global order).
Batch Run::next_batch() {
  Batch b;
  for (int r = 0; r < group->size(); ++r) {
    if (r == group->rank())
      b = batcher->next();
    else
      batcher->skip();
  }
  return b;
}

// One micro-batch per rank: gradients into g directly (one micro-batch per step), else into gm, and
// g += gm of rank 0, 1, ... (dist.h): the additions of one process accumulating the step's micro-batches in
// their global order, started during the backward when overlapped (dist_overlap.h); then the ranks' losses
// are added to *loss_sum in the same order. A compile failure on any rank restarts every rank (its round of
// the sum still runs, so the ranks' collectives match; w is untouched and g is discarded).
// ms_comm[0] += the round's communication time (the sum, on whichever thread ran it, and the loss
// exchange), ms_comm[1] += the part the training thread waited for (the loss exchange, waiting for slower
// ranks included, and the sum not hidden behind the backward).
void Run::micro_batch(const Batch& b, float scale, uint64_t data_state, StepTimes* st, double* loss_sum,
                      double ms_comm[2]) {
  float* dst = gm.empty() ? g.data() : gm.data();
  if (!gm.empty()) std::fill(gm.begin(), gm.end(), 0.0f), sum->begin(gm.data(), g.data());
  double mine[2] = {0, 0};  // loss, compile failed
  std::string code, message;
  try {
    mine[0] = engine->forward_backward(w.data(), b, scale, dst, st);
  } catch (const rt::CompileError& e) {  // the kernels of this step could not be compiled: w is untouched
    if (!group->mpi()) restart_after_compile_failure(code_name(e.code), e.what(), data_state);
    code = code_name(e.code), message = e.what(), mine[1] = 1;
  }
  const dist::SumTimes sum_ms = sum ? sum->finish() : dist::SumTimes{};
  const double t0 = now_s();
  std::vector<double> all(size_t(2 * group->size()));
  group->allgather(mine, 2, all.data());
  const double exchange_ms = (now_s() - t0) * 1000.0;
  ms_comm[0] += sum_ms.total + exchange_ms, ms_comm[1] += sum_ms.wait + exchange_ms;
  for (int r = 0; r < group->size() && message.empty(); ++r)
    if (all[size_t(2 * r + 1)] != 0) code = "other_rank", message = cat("a kernel compile failed on rank ", r);
  if (!message.empty()) restart_after_compile_failure(code, message, data_state);
  for (int r = 0; r < group->size(); ++r) *loss_sum += all[size_t(2 * r)];
}

void Run::train_step() {
  // the first step compiles every kernel
  if (steps_here == 0 && cfg.strategy != "cpu" && hooks.console && !cfg.quiet && root())
    if (const int n = engine->compiles_needed(); n > 0)
      std::printf("compiling %d kernels (%s strategy, %s) for the first step ...\n", n, cfg.strategy.c_str(),
                  cfg.backend.c_str()),
          std::fflush(stdout);
  const std::optional<power::Reading> e0 = energy_now();
  const double t0 = now_s(), cpu0 = cpu_seconds();
  StepTimes st;
  std::fill(g.begin(), g.end(), 0.0f);
  const double scale = scaler.scale;
  double loss_sum = 0, ms_comm[2] = {0, 0};  // communication, of which the training thread waited for
  const uint64_t data_state = batcher->state();
  for (int64_t a = 0; a < cfg.accum_steps; ++a)
    micro_batch(next_batch(), float(scale), data_state, &st, &loss_sum, ms_comm);
  double ms_compile = 0;  // compiles (and the ANE self-check) inside forward_backward: reported apart, not as step time
  if (auto [n, ms] = engine->take_compile_batch(); n > 0) {
    ms_compile = ms;
    compile_s += ms / 1000.0;
    emit("compile",
         {{"kernels", n}, {"ms", ms}, {"compiles_total", engine->compiles_total()}, {"budget", engine->budget()}});
  }
  if (const std::string sc = engine->take_self_check(); !sc.empty()) {  // the ANE self-check before the first step
    nlohmann::json j = nlohmann::json::parse(sc);
    ms_compile += j.value("ms", 0.0);  // a one-off like a compile: not step time
    emit("self_check", {{"kernel", j["kernel"]},
                        {"device_profile", j["device_profile"]},
                        {"max_rel_diff", j["max_rel_diff"]},
                        {"tolerance", j["tolerance"]},
                        {"agrees", j["agrees"]},
                        {"ms", j["ms"]}});
  }
  const double t_opt = now_s();
  const int64_t P = int64_t(g.size());
  const int64_t micro = cfg.accum_steps * group->size();  // micro-batches of this step, over all ranks
  scale_inplace(g.data(), P, float(1.0 / (double(micro) * scale)));
  bool finite = true;
  const double norm = global_norm(g.data(), P, &finite);
  const bool skipped = scaler.after_backward(finite);
  const double lr = learning_rate(sched, step);
  if (!skipped) {
    if (const float f = clip_factor(norm, cfg.grad_clip); f < 1.0f) scale_inplace(g.data(), P, f);
    opt->update(w.data(), g.data(), lr);
    engine->weights_updated();
  }
  ++step, ++steps_here;
  if (steps_here == 1) ::unsetenv(kCompileRestartEnv);  // progress since the restart
  last_loss = loss_sum / double(micro);
  const int64_t ntok = cfg.batch_size * cfg.seq_len * micro;
  tokens += ntok;
  const double t1 = now_s(), ms = std::max(0.0, (t1 - t0) * 1000.0 - ms_compile);
  train_s += ms / 1000.0;
  const double ms_opt = (t1 - t_opt) * 1000.0;
  nlohmann::json f = {
      {"loss", last_loss},
      {"lr", lr},
      {"grad_norm", norm},
      {"loss_scale", scale},
      {"skipped", skipped},
      {"tokens", ntok},
      {"tokens_per_s", double(ntok) * 1000.0 / std::max(ms, 1e-3)},
      {"ms", ms},
      {"ms_kernel", st.kernel},
      {"ms_cpu_dw", st.cpu_dw},
      {"ms_staging", st.staging},
      {"ms_comm", ms_comm[0]},
      {"ms_comm_wait", ms_comm[1]},
      {"ms_other", std::max(0.0, ms - st.kernel - st.cpu_dw - st.staging - ms_comm[1])},
      {"ms_fwd", st.fwd},
      {"ms_bwd", st.bwd},
      {"ms_cls", st.cls},
      {"ms_optim", ms_opt},
      {"compiles_total", engine->compiles_total()},
      {"restarts", restarts},
      {"cpu_pct", 100.0 * (cpu_seconds() - cpu0) / (t1 - t0)},
      {"elapsed_s", prior_wall + (t1 - t_start)},
      // remaining steps at this process's wall time per step (compiles excluded: they do not recur)
      {"eta_s", double(cfg.steps - step) * std::max(0.0, t1 - t_loop - compile_s) / double(steps_here)}};
  add_rss(&f);
  add_peak_rss(&f);
  add_step_energy(e0, ntok, &f);
  emit("step", std::move(f));
}

double Run::evaluate() {  // rank 0 only
  if (!root()) return std::nan("");
  if (!eval_model) eval_model = std::make_unique<CpuModel>(layout);
  double sum = 0;
  int64_t n = 0;
  Batch b;
  for (int64_t i = 0; i < cfg.eval_batches && batcher->val_batch(i, &b); ++i, ++n)
    sum += lora_engine ? lora_engine->loss(w.data(), b) : eval_model->loss(w.data(), b);
  if (n == 0) return std::nan("");
  const double v = sum / double(n);
  last_val = v;
  emit("eval", {{"val_loss", v}, {"val_tokens", n * cfg.batch_size * cfg.seq_len}});
  if (!best_val || v < *best_val) {
    best_val = v;
    checkpoint(true);
  }
  return v;
}

void Run::sample() {  // rank 0 only
  if (!root()) return;
  if (!eval_model) eval_model = std::make_unique<CpuModel>(layout);
  models::SamplerOptions so;  // the sampler of `anelab infer` (models/sampler.h)
  so.temperature = 0.8f;
  so.seed = uint64_t(cfg.seed) * 7919u + uint64_t(step);
  models::Sampler sampler(int32_t(layout.config().vocab_size), so);
  std::vector<int32_t> ids = {tokenizer && tokenizer->bos_id() >= 0 ? tokenizer->bos_id() : 1};
  std::vector<float> logits;
  std::string text;
  const std::vector<float> mw = model_weights();
  const int64_t n = std::min(cfg.sample_tokens, cfg.seq_len - 1);
  for (int64_t i = 0; i < n; ++i) {
    eval_model->last_logits(mw.data(), ids.data(), int64_t(ids.size()), &logits);
    const int32_t next = sampler.sample(logits, ids);
    text += tokenizer ? tokenizer->decode_token(ids.back(), next) : (i ? " " : "") + std::to_string(next);
    ids.push_back(next);
  }
  emit("sample", {{"text", text}, {"prompt", ""}, {"temperature", so.temperature}, {"top_p", so.top_p}, {"tokens", n}});
}

CheckpointState Run::make_state() const {
  CheckpointState s;
  s.model = layout.config();
  s.step = step, s.adam_t = opt->t();
  s.ls_dynamic = scaler.dynamic, s.ls_scale = scaler.scale, s.ls_interval = double(scaler.interval);
  s.ls_good_steps = scaler.good_steps;
  s.batching = cfg.batching, s.data_state = batcher->state();
  s.best_val_loss = best_val, s.restarts = restarts, s.tokens = tokens;
  s.wall_s = prior_wall + (now_s() - t_start), s.compile_s = prior_compile + compile_s,
  s.train_s = prior_train + train_s;
  s.compiles = prior_compiles + engine->compiles_total();
  s.config = to_json(cfg);
  return s;  // (the weights and moments: Run::checkpoint)
}

void Run::checkpoint(bool best) {  // rank 0 only
  if (!root()) return;
  const std::string path = ckpt_path(best ? "best" : "last");
  if (lora)  // first: a checkpoint is only ever next to its adapters
    write_lora_state((fs::path(cfg.run_dir) / (best ? "best.lora" : "last.lora")).string(), *lora, w, opt->m(),
                     opt->v());
  if (lora) {  // the merged model (what `infer RUN` and `export RUN` read), made in chunks as it is written (no
               // second [P] copy of the base); zero moments. The adapters' state is in KIND.lora.
    const FrozenBase& base = lora_engine->base();
    write_checkpoint(path, make_state(), [&](int64_t off, int64_t n, float* out) {
      base.to_f32(off, n, out);
      lora_merge_range(layout, *lora, w.data(), float(lora->lora().scale()), off, n, out);
    });
  } else {  // w and the moments lent to the state for the write (swapped in and back, not copied: no [P] copies)
    CheckpointState s = make_state();
    std::vector<float>* held[3] = {&w, &opt->m(), &opt->v()};
    std::vector<float>* lent[3] = {&s.weights, &s.m, &s.v};
    for (int i = 0; i < 3; ++i) held[i]->swap(*lent[i]);
    try {
      write_checkpoint(path, s);
    } catch (...) {
      for (int i = 0; i < 3; ++i) held[i]->swap(*lent[i]);
      throw;
    }
    for (int i = 0; i < 3; ++i) held[i]->swap(*lent[i]);
  }
  nlohmann::json f = {{"path", path}, {"kind", best ? "best" : "last"}};
  if (best && best_val) f["val_loss"] = *best_val;
  emit("checkpoint", f);
}

// Re-runs the program exactly as it was started (platform::saved_argv, saved in main) + --resume. The binary is
// found by platform::executable_path (absolute, so neither the cwd nor how it was invoked matters).
// Under MPI a rank cannot exec() back into its job: every rank waits for rank 0's checkpoint, then the
// process exits with kRestartExitCode and the launcher loop (scripts/mpi_train.sh) reruns the job with --resume.
void Run::exec_restart() {
  if (group->mpi()) {
    group->barrier();
    throw RestartForLauncher{};
  }
  std::vector<std::string> args = platform::saved_argv();
  if (args.empty())
    fail("train", "exec-restart: the command line was not saved (platform::save_argv not called in main)");
  if (std::find(args.begin(), args.end(), "--resume") == args.end()) args.push_back("--resume");
  const auto exe_path = platform::executable_path();
  if (!exe_path) fail("train", "exec-restart: cannot find the running executable: ", exe_path.reason);
  const std::string exe = *exe_path;
  std::fflush(stdout);
  std::fflush(stderr);
  events.reset();
  const std::string why = platform::exec_replace(exe, args);
  fail("train", "exec-restart: execv(", exe, ") failed: ", why, "; resume by hand with --resume");
}

void Run::maybe_restart() {
  const int need = engine->compiles_needed(), left = engine->compiles_left();
  if (left < 0 || need <= left) return;
  if (engine->compiles_total() == 0)
    fail("train", "--compile-budget ", engine->budget(), " is too small: one step needs ", need, " compiles");
  if (!hooks.allow_exec_restart) fail("train", "compile budget spent and exec-restart is disabled");
  emit("restart",
       {{"reason", "compile_budget"}, {"compiles_total", engine->compiles_total()}, {"budget", engine->budget()}});
  ++restarts;
  checkpoint(false);
  exec_restart();
}

// Any compile failure (budget, or the compiler failing: maybe transiently) while preparing a step's kernels:
// checkpoint the last completed step (the data position as before this step) and exec-restart, as maderix's
// train_large.m does. If it happens again before this process completed a step after such a restart, it is
// a real error: fail, do not loop.
void Run::restart_after_compile_failure(const std::string& code, const std::string& message, uint64_t data_state) {
  batcher->set_state(data_state);
  if (const char* prev = std::getenv(kCompileRestartEnv); prev && steps_here == 0)
    fail("train", "a kernel compile failed again right after the exec-restart for a compile failure at ", prev,
         " (not restarting again; last.ckpt holds step ", step, "): ", message);
  if (group->mpi() && cfg.resume && steps_here == 0)  // no environment survives the launcher: any resumed start
    fail("train",
         "a kernel compile failed before the first step of a resumed MPI job (not restarting again; last.ckpt "
         "holds step ",
         step, "): ", message);
  if (!hooks.allow_exec_restart) fail("train", "a kernel compile failed and exec-restart is disabled: ", message);
  emit("restart", {{"reason", "compile_failure"},
                   {"code", code},
                   {"message", message},
                   {"compiles_total", engine->compiles_total()},
                   {"budget", engine->budget()}});
  ++restarts;
  checkpoint(false);
  ::setenv(kCompileRestartEnv, cat("step ", step).c_str(), 1);
  exec_restart();
}

TrainOutcome Run::finish(bool finished) {
  check_same_weights();
  if (finished && cfg.eval_batches > 0 && data->n_val() > 0) evaluate();
  checkpoint(false);
  TrainOutcome o{step, last_loss, best_val, last_val, finished, steps_here ? train_s * 1000.0 / double(steps_here) : 0};
  if (!finished) return o;
  const bool energy_ok = energy_tokens > 0 && power_reason.empty();  // every step of this process measured
  const double flops =
      CpuModel::step_flops(layout.config(), cfg.batch_size, cfg.seq_len) * double(cfg.accum_steps * group->size());
  nlohmann::json end = {
      {"steps", step},
      {"wall_s", prior_wall + (now_s() - t_start)},
      {"compile_s", prior_compile + compile_s},
      {"train_s", prior_train + train_s},
      {"train_ms_per_step", o.train_ms_per_step},
      {"gflops", train_s > 0 ? flops * double(steps_here) / train_s / 1e9 : 0.0},
      {"final_loss", last_loss},
      {"best_val_loss", best_val ? nlohmann::json(*best_val) : nlohmann::json(nullptr)},
      {"steps_this_process", steps_here},
      {"restarts", restarts},
      {"energy_j", energy_ok ? nlohmann::json(energy_j) : nlohmann::json(nullptr)},
      {"j_per_token", energy_ok ? nlohmann::json(energy_j / double(energy_tokens)) : nlohmann::json(nullptr)},
      {"power", power_json()}};
  add_peak_rss(&end);
  emit("run_end", end);
  if (hooks.console && !cfg.quiet && root()) std::printf("%s", efficiency_report(end).c_str());
  return o;
}

}  // namespace

TrainOutcome run_training(const TrainConfig& c, const RunHooks& hooks) {
  Run r;
  r.group = dist::open_group(c.launcher);
  r.cfg = c;
  r.hooks = hooks;
  r.setup();
  if (r.already_finished) {
    if (hooks.console && r.root())
      std::printf(
          "run %s already finished: step %lld of --steps %lld; nothing to do, nothing changed (raise --steps to "
          "extend it)\n",
          c.run.c_str(), static_cast<long long>(r.step), static_cast<long long>(c.steps));
    TrainOutcome o;
    o.steps = r.step, o.best_val_loss = r.best_val, o.finished = true, o.already_finished = true;
    return o;
  }
  try {
    r.emit_start(c.resume);
    r.t_loop = now_s();
    while (r.step < c.steps) {
      if (c.stop_after > 0 && r.steps_here >= c.stop_after) return r.finish(false);
      r.maybe_restart();
      r.train_step();
      if (c.eval_every > 0 && r.step % c.eval_every == 0 && r.step < c.steps) r.evaluate();
      if (c.sample_every > 0 && r.step % c.sample_every == 0) r.sample();
      if (c.checkpoint_every > 0 && r.step % c.checkpoint_every == 0 && r.step < c.steps) {
        r.check_same_weights();
        r.checkpoint(false);
      }
    }
    return r.finish(true);
  } catch (const RestartForLauncher&) {
    TrainOutcome o;
    o.steps = r.step, o.restart = true;
    return o;
  } catch (const std::exception& e) {
    if (r.events) r.events->emit("error", r.step, {{"message", e.what()}});
    throw;
  }
}

}  // namespace anelab::train
