// Usage errors that CLI11 words poorly, checked before parsing: an unknown subcommand (CLI11 says "A
// subcommand is required") and an unknown option ("The following arguments were not expected"). Both are
// named here with the closest known name, as git does ("unknown command 'trian'; did you mean 'train'?").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cli/commands.h"
#include "infer/params_check.h"

namespace anelab::cli {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool is_number(const std::string& t) {
  char* end = nullptr;
  std::strtod(t.c_str(), &end);
  return end && *end == '\0' && end != t.c_str();
}

bool has_positionals(CLI::App* app) {
  return !app->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
}

const CLI::Option* find_option(CLI::App* app, const std::string& name) {
  for (const CLI::Option* o : app->get_options())
    if (o->check_name(name)) return o;
  return nullptr;
}

std::vector<std::string> option_names(CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app->get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& names) {
  const std::string w = closest_name(word, names);
  return w.empty() ? "" : "; did you mean '" + w + "'?";
}

}  // namespace

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;  // farther than this is no suggestion
  for (const auto& n : names) {
    const size_t d = n.rfind(word, 0) == 0 && word.size() >= 3 ? 1 : edit_distance(word, n);  // prefixes count as close
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

CLI::Validator number_in(const infer::ParamRange& r) {
  return CLI::Validator(
      [r](std::string& v) {
        char* end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0') return "'" + v + "' is not a number";
        return infer::range_error(r, x, v);
      },
      infer::range_text(r));
}

CLI::Validator number_in(double lo, double hi, bool above_lo) {
  return number_in(infer::ParamRange{"", lo, hi, above_lo});
}

std::optional<std::string> usage_error(CLI::App& app, int argc, const char* const* argv) {
  CLI::App* cur = &app;
  std::string path = "anelab";
  bool commands_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string t = argv[i];
    if (t == "--") break;
    if (t.size() > 1 && t[0] == '-') {
      if (is_number(t)) continue;  // a negative value ("-t -1" is checked by the option's range)
      const std::string name = t[1] == '-' ? t.substr(0, t.find('=')) : t.substr(0, 2);
      const CLI::Option* o = find_option(cur, name);
      if (!o)
        return "unknown option '" + name + "' for '" + path + "'" + did_you_mean(name, option_names(cur)) + " (see '" +
               path + " --help')";
      // "--steps 3" / "-n 3": the next word is the option's value, not a command ("--steps=3", "-n3" hold it).
      if (o->get_items_expected_min() > 0 && t.size() == name.size() && i + 1 < argc) ++i;
      continue;
    }
    if (commands_done) continue;
    const std::vector<CLI::App*> subs = cur->get_subcommands([](CLI::App* s) { return !s->get_name().empty(); });
    if (subs.empty() || has_positionals(cur)) {
      commands_done = true;
      continue;
    }
    CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (CLI::App* s : subs) {
      names.push_back(s->get_name());
      if (s->check_name(t)) next = s;
    }
    if (!next)
      return "unknown command '" + t + "'" + (cur == &app ? "" : " for '" + path + "'") + did_you_mean(t, names) +
             " (see '" + path + " --help')";
    cur = next;
    path += " " + next->get_name();
  }
  return std::nullopt;
}

}  // namespace anelab::cli
