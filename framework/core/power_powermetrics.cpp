// macOS `powermetrics --samplers cpu_power,gpu_power,ane_power -f plist [-i MS]` output: a stream of
// XML property lists (Apple's PropertyList-1.0 DTD), one per sample, separated by NUL bytes. Per sample:
//   elapsed_ns                       integer, the sample's interval in nanoseconds (required)
//   cpu_energy, gpu_energy, ane_energy   energy over the interval, millijoules (integers)
//   cpu_power, gpu_power, ane_power      average power over the interval, milliwatts (reals)
//   combined_power                   cpu + gpu + ane, milliwatts (not used: the rails are kept apart)
// The rail keys sit in the `processor` dict on the macOS versions whose output public parsers document
// (asitop's parse_powermetrics.py reads processor.cpu_energy / gpu_energy / ane_energy in mJ, macadmins'
// osquery extension and several others processor.cpu_power / gpu_power / ane_power / combined_power in
// mW, all with a top-level elapsed_ns); other versions put them at the top level. Both are accepted:
// `processor` first, then the top level.
// Energy of a rail over a sample: its *_energy key (mJ / 1000) when present, else its *_power key
// (mW / 1000) x elapsed_ns / 1e9. A rail with neither is not available (NaN); a rail that the first
// sample had and a later one lacks is an error. Values must be finite non-negative numbers.
// Errors name the file (or the powermetrics child), the sample number, its byte offset and what is wrong.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/power.h"

extern char** environ;

namespace anelab::power {
namespace {
using nlohmann::json;

// ---- a small XML property-list reader (dict, array, key, string, integer, real, true, false, date, data)
struct PlistError {
  std::string what;
  size_t at;  // offset inside the document
};

class PlistReader {
 public:
  explicit PlistReader(std::string_view s) : s_(s) {}

  json document() {
    skip_misc();
    Tag t = open_tag();
    if (t.name != "plist") throw PlistError{"expected <plist>, found <" + t.name + ">", t.at};
    if (t.empty) throw PlistError{"empty <plist/>", t.at};
    skip_misc();
    json v = value(open_tag());
    skip_misc();
    close_tag("plist");
    skip_misc();
    if (p_ != s_.size()) throw PlistError{"unexpected data after </plist>", p_};
    return v;
  }

 private:
  struct Tag {
    std::string name;
    bool empty = false;  // <x/>
    size_t at = 0;
  };

  [[noreturn]] void truncated(const char* what) const { throw PlistError{std::string("truncated: ") + what, p_}; }

  void skip_ws() {
    while (p_ < s_.size() && std::strchr(" \t\r\n", s_[p_])) ++p_;
  }
  // Whitespace, <?xml ...?>, <!DOCTYPE ...>, <!-- ... -->.
  void skip_misc() {
    for (;;) {
      skip_ws();
      if (s_.compare(p_, 4, "<!--") == 0)
        skip_past("-->");
      else if (s_.compare(p_, 2, "<?") == 0)
        skip_past("?>");
      else if (s_.compare(p_, 2, "<!") == 0)
        skip_past(">");
      else
        return;
    }
  }
  void skip_past(const char* end) {
    const size_t e = s_.find(end, p_);
    if (e == std::string_view::npos) truncated("unterminated XML declaration or comment");
    p_ = e + std::strlen(end);
  }

  Tag open_tag() {
    skip_ws();
    if (p_ >= s_.size()) truncated("expected an element");
    if (s_[p_] != '<' || s_.compare(p_, 2, "</") == 0) throw PlistError{"expected an element", p_};
    Tag t;
    t.at = p_++;
    while (p_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) t.name += s_[p_++];
    const size_t gt = s_.find('>', p_);
    if (gt == std::string_view::npos) truncated("unterminated tag");
    if (t.name.empty()) throw PlistError{"bad tag", t.at};
    t.empty = gt > p_ && s_[gt - 1] == '/';
    p_ = gt + 1;
    return t;
  }

  void close_tag(const std::string& name) {
    skip_ws();
    if (p_ >= s_.size()) truncated(("missing </" + name + ">").c_str());
    const std::string want = "</" + name + ">";
    if (s_.compare(p_, want.size(), want) != 0) {
      if (s_.size() - p_ < want.size() && want.compare(0, s_.size() - p_, s_.substr(p_)) == 0)
        truncated(("missing </" + name + ">").c_str());
      throw PlistError{"expected " + want, p_};
    }
    p_ += want.size();
  }

  std::string text(const std::string& name) {
    const size_t lt = s_.find('<', p_);
    if (lt == std::string_view::npos) truncated(("text of <" + name + "> not closed").c_str());
    std::string out;
    for (size_t i = p_; i < lt; ++i) {
      if (s_[i] != '&') {
        out += s_[i];
        continue;
      }
      static const std::pair<const char*, char> ents[] = {
          {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      bool ok = false;
      for (const auto& [e, c] : ents)
        if (s_.compare(i, std::strlen(e), e) == 0) out += c, i += std::strlen(e) - 1, ok = true;
      if (!ok) throw PlistError{"unknown XML entity", i};
    }
    p_ = lt;
    close_tag(name);
    return out;
  }

  json number(const Tag& t, const std::string& txt) {
    const char* b = txt.c_str();
    while (*b == ' ' || *b == '\n' || *b == '\t') ++b;
    char* e = nullptr;
    errno = 0;
    if (t.name == "integer") {
      const long long v = std::strtoll(b, &e, 10);
      if (e == b || errno == ERANGE || *e) throw PlistError{"<integer> '" + txt + "' is not an integer", t.at};
      return json(static_cast<int64_t>(v));
    }
    const double v = std::strtod(b, &e);
    if (e == b || *e) throw PlistError{"<real> '" + txt + "' is not a number", t.at};
    return json(v);
  }

  json value(const Tag& t) {
    if (t.name == "true" || t.name == "false") {
      if (!t.empty) close_tag(t.name);
      return json(t.name == "true");
    }
    if (t.name == "dict") return t.empty ? json::object() : dict();
    if (t.name == "array") return t.empty ? json::array() : array();
    if (t.name == "string" || t.name == "date" || t.name == "data") return t.empty ? json("") : json(text(t.name));
    if (t.name == "integer" || t.name == "real") {
      if (t.empty) throw PlistError{"empty <" + t.name + "/>", t.at};
      return number(t, text(t.name));
    }
    throw PlistError{"unknown plist element <" + t.name + ">", t.at};
  }

  json dict() {
    json d = json::object();
    for (;;) {
      skip_misc();
      if (s_.compare(p_, 2, "</") == 0 || p_ >= s_.size()) break;
      Tag k = open_tag();
      if (k.name != "key") throw PlistError{"expected <key> in <dict>, found <" + k.name + ">", k.at};
      const std::string key = k.empty ? "" : text("key");
      skip_misc();
      d[key] = value(open_tag());
    }
    close_tag("dict");
    return d;
  }

  json array() {
    json a = json::array();
    for (;;) {
      skip_misc();
      if (s_.compare(p_, 2, "</") == 0 || p_ >= s_.size()) break;
      a.push_back(value(open_tag()));
    }
    close_tag("array");
    return a;
  }

  std::string_view s_;
  size_t p_ = 0;
};

// ---- one sample -> energy per rail
struct RailKeys {
  Rail rail;
  const char *energy, *power;
};
constexpr RailKeys kKeys[] = {{Rail::cpu, "cpu_energy", "cpu_power"},
                              {Rail::gpu, "gpu_energy", "gpu_power"},
                              {Rail::ane, "ane_energy", "ane_power"}};

// The value of `key` in doc.processor, else at the top level; null when absent.
const json* find_key(const json& doc, const char* key, std::string* where) {
  auto it = doc.find("processor");
  if (it != doc.end() && it->is_object() && it->contains(key)) {
    *where = std::string("processor.") + key;
    return &(*it)[key];
  }
  if (doc.contains(key)) {
    *where = key;
    return &doc[key];
  }
  return nullptr;
}

double non_negative(const json& v, const std::string& where) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
    throw PlistError{where + " is " + v.dump() + ", not a finite non-negative number", 0};
  return v.get<double>();
}

struct ParsedSample {
  double seconds = 0;
  RailEnergy joules;
  std::string basis;
};

ParsedSample parse_sample(const json& doc) {
  if (!doc.is_object()) throw PlistError{"the sample is not a <dict>", 0};
  ParsedSample s;
  auto el = doc.find("elapsed_ns");
  if (el == doc.end()) throw PlistError{"no elapsed_ns key (the sample's interval)", 0};
  if (!el->is_number_integer() || el->get<int64_t>() <= 0)
    throw PlistError{"elapsed_ns is " + el->dump() + ", not a positive integer", 0};
  s.seconds = static_cast<double>(el->get<int64_t>()) * 1e-9;
  int n_energy = 0, n_power = 0;
  for (const auto& k : kKeys) {
    std::string where;
    if (const json* e = find_key(doc, k.energy, &where)) {
      s.joules[k.rail] = non_negative(*e, where) * 1e-3;
      ++n_energy;
    } else if (const json* p = find_key(doc, k.power, &where)) {
      s.joules[k.rail] = non_negative(*p, where) * 1e-3 * s.seconds;
      ++n_power;
    }
  }
  if (!s.joules.any())
    throw PlistError{"no cpu/gpu/ane *_energy or *_power keys (in processor or at the top level)", 0};
  s.basis = n_power == 0    ? "energy keys (mJ)"
            : n_energy == 0 ? "power keys (mW) x elapsed_ns"
                            : "energy keys (mJ) where present, else power keys (mW) x elapsed_ns";
  return s;
}

// ---- the NUL-separated stream, from a file or a pipe
class PowermetricsStream final : public Source {
 public:
  PowermetricsStream(int fd, std::string label, bool live, pid_t child)
      : fd_(fd), label_(std::move(label)), live_(live), child_(child) {}
  ~PowermetricsStream() override {
    interrupt();
    if (fd_ >= 0) ::close(fd_);
    if (child_ > 0) ::waitpid(child_, nullptr, 0);
  }
  std::string name() const override { return live_ ? "powermetrics" : "powermetrics-file"; }
  std::string detail() const override { return label_; }
  std::string basis() const override { return basis_.empty() ? "powermetrics samples" : basis_; }
  bool self_paced() const override { return true; }
  std::vector<Rail> rails() const override { return rails_; }
  void interrupt() override {
    if (child_ > 0 && !killed_) ::kill(child_, SIGTERM), killed_ = true;
  }

  bool next(Reading* out) override {
    std::string doc;
    size_t at = 0;
    if (!next_document(&doc, &at)) {
      if (index_ == 0) fail("power", label_, ": no powermetrics samples (empty stream)");
      return false;
    }
    ++index_;
    ParsedSample s;
    try {
      s = parse_sample(PlistReader(doc).document());
    } catch (const PlistError& e) {
      fail("power", label_, ": sample ", index_, " (byte ", at + e.at, "): ", e.what);
    }
    check_rails(s);
    total_.seconds += s.seconds;
    for (Rail r : rails_) total_.joules[r] = (total_.joules.has(r) ? total_.joules[r] : 0.0) + s.joules[r];
    basis_ = s.basis;
    *out = total_;
    return true;
  }

 private:
  void check_rails(const ParsedSample& s) {
    if (index_ == 1) {
      for (Rail r : kAllRails)
        if (s.joules.has(r)) rails_.push_back(r);
      return;
    }
    for (Rail r : rails_)
      if (!s.joules.has(r))
        fail("power", label_, ": sample ", index_, " has no ", rail_name(r), "_energy or ", rail_name(r),
             "_power key, which sample 1 had");
  }

  // The next non-blank NUL-terminated document (the last one may end at EOF); false at the end.
  bool next_document(std::string* doc, size_t* at) {
    for (;;) {
      const size_t nul = buf_.find('\0');
      if (nul != std::string::npos || eof_) {
        const size_t end = nul != std::string::npos ? nul : buf_.size();
        std::string d = buf_.substr(0, end);
        const size_t start = offset_;
        buf_.erase(0, std::min(buf_.size(), end + 1));
        offset_ += end + 1;
        if (d.find_first_not_of(" \t\r\n") != std::string::npos) {
          *doc = std::move(d);
          *at = start;
          return true;
        }
        if (eof_ && buf_.empty()) return false;
        continue;
      }
      char chunk[65536];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("power", label_, ": read failed: ", std::strerror(errno));
      if (n == 0)
        eof_ = true;
      else
        buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  int fd_ = -1;
  std::string label_;
  bool live_ = false, eof_ = false, killed_ = false;
  pid_t child_ = -1;
  std::string buf_, basis_;
  size_t offset_ = 0;
  int index_ = 0;
  std::vector<Rail> rails_;
  Reading total_;
};
}  // namespace

std::unique_ptr<Source> open_powermetrics_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("power", "cannot open powermetrics recording ", path, ": ", std::strerror(errno));
  if (std::filesystem::is_directory(path)) {
    ::close(fd);
    fail("power", "powermetrics recording ", path, " is a directory");
  }
  return std::make_unique<PowermetricsStream>(fd, path, false, -1);
}

Opened open_powermetrics_live(int interval_ms) {
  Opened o;
#if defined(__APPLE__)
  const char* exe = "/usr/bin/powermetrics";
  if (::access(exe, X_OK) != 0) {
    o.reason = std::string("powermetrics: ") + exe + " not found";
    return o;
  }
  if (::geteuid() != 0) {
    o.reason = "powermetrics: needs root (run as root, e.g. sudo anelab ...)";
    return o;
  }
  int fds[2];
  if (::pipe(fds) != 0) {
    o.reason = std::string("powermetrics: pipe failed: ") + std::strerror(errno);
    return o;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  const std::string ms = std::to_string(interval_ms > 0 ? interval_ms : 1000);
  const char* argv[] = {exe, "--samplers", "cpu_power,gpu_power,ane_power", "-f", "plist", "-i", ms.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe, &fa, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    o.reason = std::string("powermetrics: cannot start ") + exe + ": " + std::strerror(rc);
    return o;
  }
  ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  o.source = std::make_unique<PowermetricsStream>(
      fds[0], std::string(exe) + " -i " + ms + " (pid " + std::to_string(pid) + ")", true, pid);
#else
  (void)interval_ms;
  o.reason = "powermetrics: macOS only";
#endif
  return o;
}

}  // namespace anelab::power
