// Power and energy, measured (never estimated), behind one interface.
//
// A Source yields cumulative energy readings (joules per rail since it was opened, and the seconds they
// cover). Rails a source does not have are NaN ("not available"), never 0. Sources:
//   - "powermetrics-file": a recorded `powermetrics --samplers cpu_power,gpu_power,ane_power -f plist`
//     stream (power_powermetrics.cpp; the format is documented there). Self-paced: each reading is the
//     next sample, its interval the sample's own elapsed_ns.
//   - "powermetrics": the same stream from a live `powermetrics -i MS` child (macOS, root only).
//   - "ioreport": IOReport "Energy Model" counters (macOS, no root; power_ioreport_macos.cpp).
//   - "rapl": Linux RAPL energy counters in the powercap sysfs tree (power_rapl_linux.cpp).
// select_source() picks one: --powermetrics-file > (macOS: IOReport, else powermetrics if root) >
// (Linux: RAPL if readable), and records why each other source is unavailable.
//
// Rails: cpu, gpu, ane (Apple: powermetrics / IOReport), dram and core (RAPL). On RAPL `cpu` is the sum
// of the package zones (the CPU socket) and `core` the cores inside them; total() therefore never adds
// `core` (it is part of `cpu`).
#pragma once
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace anelab::power {

enum class Rail : int { cpu = 0, gpu, ane, dram, core };
constexpr int kRails = 5;
constexpr std::array<Rail, kRails> kAllRails = {Rail::cpu, Rail::gpu, Rail::ane, Rail::dram, Rail::core};
const char* rail_name(Rail r);  // "cpu", "gpu", "ane", "dram", "core"

// Joules per rail; NaN where the source has no such rail.
struct RailEnergy {
  std::array<double, kRails> j = {NAN, NAN, NAN, NAN, NAN};
  double& operator[](Rail r) { return j[static_cast<int>(r)]; }
  double operator[](Rail r) const { return j[static_cast<int>(r)]; }
  bool has(Rail r) const { return !std::isnan((*this)[r]); }
  bool any() const;
  // cpu + gpu + ane + dram over the rails present (core is inside cpu); NaN when none is present.
  double total() const;
};

// Cumulative since the source was opened.
struct Reading {
  double seconds = 0;
  RailEnergy joules;
};

// Energy over one interval, and its watts.
struct Sample {
  double seconds = 0;
  RailEnergy joules;
  double watts(Rail r) const { return seconds > 0 ? joules[r] / seconds : NAN; }
  double total_watts() const { return seconds > 0 ? joules.total() / seconds : NAN; }
};
Sample difference(const Reading& before, const Reading& after);

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string name() const = 0;    // "rapl", "ioreport", "powermetrics", "powermetrics-file"
  virtual std::string detail() const = 0;  // where the numbers come from, e.g. the zones or the file
  // How its numbers are obtained, e.g. "energy counters" or "energy keys (mJ)".
  virtual std::string basis() const = 0;
  // true: next() waits for the source's own samples (streams); false: next() reads counters now.
  virtual bool self_paced() const = 0;
  // Rails this source reports (fixed once open); its readings are NaN on the others.
  virtual std::vector<Rail> rails() const = 0;
  // The next cumulative reading; false at the end of a finite stream. Throws anelab::Error
  // ("[power] ...", naming the file and what is wrong) on malformed input or a failed read.
  virtual bool next(Reading* out) = 0;
  // Makes a blocked next() return (streams from a child process); counter sources need nothing.
  virtual void interrupt() {}
};

// One opener per source: a source, or the reason it is not available here.
struct Opened {
  std::unique_ptr<Source> source;
  std::string reason;  // set when source is null
};
// Counter sources time their readings with `clock` (seconds; default: a steady clock).
using Clock = std::function<double()>;
// root "": the system's powercap tree.
Opened open_rapl(const std::string& root = "", Clock clock = {});  // power_rapl_linux.cpp
Opened open_ioreport();                                            // power_ioreport_macos.cpp
Opened open_powermetrics_live(int interval_ms);                    // power_powermetrics.cpp
// Throws anelab::Error when the file cannot be read (bad contents are reported by next()).
std::unique_ptr<Source> open_powermetrics_file(const std::string& path);

struct SourceOptions {
  std::string powermetrics_file;  // replay this recording (wins over everything else)
  int interval_ms = 1000;         // live powermetrics: its -i
  std::string rapl_root;          // "": the system's powercap tree (a fake tree in tests)
};

struct Selection {
  std::unique_ptr<Source> source;        // null: none available
  std::vector<std::string> unavailable;  // "name: reason" for each source not used
  std::string reason() const;            // why none is available ("; "-joined), or why others are not
};
Selection select_source(const SourceOptions& o = {});

// Energy for the rest of the program (trainer, dashboard, bench, server): a selected source behind a
// mutex. Counter sources are read on demand; a self-paced source is drained by a background thread and
// energy() returns the total up to its newest sample (so the resolution is its sample interval).
class Meter {
 public:
  explicit Meter(Selection s);
  ~Meter();
  Meter(const Meter&) = delete;
  Meter& operator=(const Meter&) = delete;

  bool available() const { return source_ != nullptr; }
  std::string source_name() const { return source_ ? source_->name() : ""; }
  const std::string& reason() const { return reason_; }  // why not available ("" when available)
  std::vector<Rail> rails() const;
  // Cumulative energy now. Throws anelab::Error when a counter read fails.
  Reading energy();

 private:
  std::unique_ptr<Source> source_;
  std::string reason_;
  std::mutex mu_;
  Reading last_;
  std::thread worker_;
  std::atomic<bool> stop_{false};
  std::string worker_error_;
};

// The default meter for this machine (select_source({})), with a "not available on this machine: ..."
// reason when there is none.
std::unique_ptr<Meter> default_meter();

}  // namespace anelab::power
