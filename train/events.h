// The run's structured event stream (docs/events.md, schema 1): EventLog appends one JSON object per
// line to <run-dir>/events.jsonl (one write(2) per line, O_APPEND; a short write — disk full, file size
// limit — is cut back off the file and stops the run with one line naming the file, so no torn line stays). The console
// progress line and the end-of-run Efficiency Report are formatters over the same events; nothing else prints training
// progress.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace anelab::train {

constexpr int kEventsSchema = 1;

class EventLog {
 public:
  EventLog() = default;
  explicit EventLog(const std::string& path);  // "" = no file (events only go to the console formatter)
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  // Adds "event", "t" (unix seconds), "step", writes the line, and returns the full event. Throws
  // anelab::Error "[train] cannot append to PATH: ..." when the whole line cannot be written.
  nlohmann::json emit(const std::string& event, int64_t step, nlohmann::json fields);
  const std::string& path() const { return path_; }

 private:
  void append_line(const std::string& line);
  int fd_ = -1;
  std::string path_;
};

// "42s", "3m05s", "1h02m": elapsed / ETA in console lines.
std::string duration_text(double seconds);
// One console line for an event ("" when the event has no console form). total = the run's --steps.
std::string console_line(const nlohmann::json& ev, int64_t total_steps);
// The Efficiency Report, formatted from a run_end event (plus this process's step count and token rate).
std::string efficiency_report(const nlohmann::json& run_end);

// Process resource use into an event: "rss_mb" = the resident set (MiB), null when the OS gives none; where only
// the peak is known (Linux with procfs hidden) it is the peak and "rss_is_peak" is true.
void add_rss(nlohmann::json* ev);
// "peak_rss_mb": the process's peak resident set so far (MiB, platform::peak_rss_mb), null when the OS gives none.
void add_peak_rss(nlohmann::json* ev);
// CPU seconds (user + system) of this process so far.
double cpu_seconds();
double unix_time();

}  // namespace anelab::train
