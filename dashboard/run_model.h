// Run model: what the dashboard knows about one training run, built from its events.jsonl
// (schema: docs/events.md). GUI-free so it can be unit-tested.
//
// - Step events become rows of a columnar table (one std::vector<double> per quantity, NaN where a
//   field is missing), eval events rows of a second table; both are ordered by arrival.
// - Step energy (energy_j, j_per_token) is NaN when the event has null there; whether the trainer had a
//   power source at all, and why not, comes from run_start.power (power_state, power_reason).
// - Markers (compile batches, exec-restarts, resumes, checkpoints, fatal errors) are kept with their
//   step and time so plots can draw them on either axis.
// - A run_start whose `step` is below the last recorded step (a --resume from an older checkpoint)
//   drops the superseded rows: the new process repeats those steps.
// - Lines that are not a JSON object with a string `event` are counted as malformed; the first one
//   (line number + message) and the most recent few are kept for display. Fields of the wrong type
//   read as missing. Unknown event types and fields are ignored (counted).
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "dashboard/line_follower.h"

namespace anelab::dashboard {

// Columns of the step table; names match the `step` event's fields (t = wall time).
enum class Col : int {
  step,
  t,
  loss,
  lr,
  grad_norm,
  loss_scale,
  tokens,
  tokens_per_s,
  ms,
  ms_kernel,
  ms_cpu_dw,
  ms_staging,
  ms_comm,
  ms_comm_wait,
  ms_other,
  compiles_total,
  restarts,
  rss_mb,
  cpu_pct,
  skipped,
  energy_j,
  j_per_token,
  kCount
};
const char* col_name(Col c);

struct Table {
  static constexpr int kCols = static_cast<int>(Col::kCount);
  std::array<std::vector<double>, kCols> cols;
  size_t size() const { return cols[0].size(); }
  const std::vector<double>& operator[](Col c) const { return cols[static_cast<int>(c)]; }
  std::vector<double>& operator[](Col c) { return cols[static_cast<int>(c)]; }
  void clear();
  void drop_after_step(double step);  // removes rows with step > `step`
};

// Validation points (eval events).
struct EvalTable {
  std::vector<double> step, t, val_loss;
  size_t size() const { return step.size(); }
  void clear() { step.clear(), t.clear(), val_loss.clear(); }
  void drop_after_step(double s);
};

enum class MarkerKind { compile, restart, run_start, resume, checkpoint, error };

struct Marker {
  MarkerKind kind;
  double step = 0, t = 0;
  std::string label;
};

struct Sample {
  double step = 0, t = 0, temperature = 0, top_p = 0, tokens = 0;
  std::string prompt, text;
};

struct LineError {
  uint64_t line = 0;
  std::string message;
};

enum class RunStatus { waiting, running, finished, failed, stopped };

// Whether the trainer could measure energy (run_start.power): unknown until a run_start says so (older
// runs never do). not_available is a state of its own, shown as such, never plotted as zeros.
enum class PowerState { unknown, available, not_available };
const char* status_name(RunStatus s);

class RunData {
 public:
  explicit RunData(std::string dir);  // dir is a run directory; events are read from dir/events.jsonl

  // Reads what was appended since the last call and applies it. Returns true when anything changed.
  bool poll(size_t max_bytes = LineFollower::kDefaultChunk);
  // Applies one line (exposed for tests and for feeding recorded lines without a file).
  void apply_line(std::string_view text, uint64_t line_no);
  void reset();  // drop everything derived from the file (it was truncated or replaced)

  // Updates `status` from the trainer pid (same machine only) and the last event.
  void refresh_status(double now_s);

  // --- identity
  std::string dir, events_path, name;  // name: run_start.run, else the directory's base name
  // --- data
  Table steps;
  EvalTable evals;
  std::vector<Marker> markers;
  std::vector<Sample> samples;
  nlohmann::json config = nlohmann::json::object();  // latest run_start.config
  nlohmann::json model = nlohmann::json::object();   // latest run_start.model
  nlohmann::json run_end;                            // null until run_end
  std::string backend, device, strategy, fatal_error, last_checkpoint, best_checkpoint;
  int64_t pid = 0, schema = 0, restarts = 0, starts = 0, compiles_total = 0, compile_budget = 0;
  int64_t compile_kernels = 0;
  double compile_ms = 0, first_t = 0, last_t = 0, best_val_loss = 0;
  bool have_best_val = false;
  PowerState power_state = PowerState::unknown;
  std::string power_source, power_reason;  // run_start.power.source / .reason
  RunStatus status = RunStatus::waiting;
  // --- reading statistics and errors
  uint64_t events = 0, malformed = 0, ignored = 0, dropped_rows = 0, polls_with_data = 0;
  LineError first_error;                // line == 0: none
  std::deque<LineError> recent_errors;  // at most kRecentErrors, newest last
  std::string io_error;                 // e.g. permission denied on events.jsonl
  bool file_exists = false;
  static constexpr size_t kRecentErrors = 20;

  const LineFollower& follower() const { return follower_; }

 private:
  void add_error(uint64_t line, std::string msg);
  static std::string cat_line_too_long();
  void on_run_start(const nlohmann::json& e, double step, double t);
  void on_step(const nlohmann::json& e, double step, double t);
  void on_power(const nlohmann::json& run_start);

  LineFollower follower_;
};

// Reads a JSON number field; NaN when absent or not a number (bools count as 0/1).
double num_field(const nlohmann::json& e, const char* key);

}  // namespace anelab::dashboard
