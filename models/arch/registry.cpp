// The table of architectures: the one list naming every models/arch/<name>.cpp.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/core/error.h"
#include "models/arch/arch.h"
#include "models/arch/arch_list.h"

namespace anelab::models {

const std::vector<const Arch*>& architectures() {
  static const std::vector<const Arch*> all = {&llama_arch(), &qwen2_arch(),  &gpt2_arch(),
                                               &qwen3_arch(), &gemma3_arch(), &qwen35_arch()};
  return all;
}

const Arch* find_arch(std::string_view name) {
  for (const Arch* a : architectures())
    if (a->name == name) return a;
  return nullptr;
}

std::string arch_names() {
  std::string s;
  for (const Arch* a : architectures()) s += (s.empty() ? "" : ", ") + a->name;
  return s;
}

const Arch& arch_of(std::string_view name, const std::string& where) {
  if (const Arch* a = find_arch(name)) return *a;
  fail("model", where, ": architecture '", name, "' is not supported (use ", arch_names(), ")");
}

float param(const ModelConfig& c, const ParamSpec& p) {
  auto it = c.params.find(p.name);
  return static_cast<float>(it == c.params.end() ? p.def : it->second.value());
}

int64_t param_int(const ModelConfig& c, const ParamSpec& p) {
  auto it = c.params.find(p.name);
  const double v = it == c.params.end() ? p.def : it->second.value();
  // Saturated: a file's value is read (and the description built from it) before validate_config refuses it.
  constexpr double kLim = 9.0e18;
  return v >= kLim ? INT64_MAX : v <= -kLim ? INT64_MIN : v == v ? static_cast<int64_t>(v) : 0;
}

void set_param(ModelConfig* c, const ParamSpec& p, double v) {
  c->params[p.name] =
      p.integer ? ParamValue{true, static_cast<int64_t>(v), 0.0f} : ParamValue{false, 0, static_cast<float>(v)};
}

namespace {
const ParamSpec* find_param(const Arch& a, std::string_view name) {
  for (const ParamSpec* p : a.params)
    if (name == p->name) return p;
  return nullptr;
}

// Files written before the parameter tables carried every architecture's parameters as config fields, at their
// no-op value where the architecture had none: a parameter another architecture declares, at that declaration's
// default, is such a key.
bool legacy_noop(std::string_view name, const ParamValue& v) {
  for (const Arch* a : architectures())
    if (const ParamSpec* p = find_param(*a, name)) return v.value() == p->def;
  return false;
}

bool implies(const Arch& a, std::string_view flag) {
  for (const char* f : a.implied_flags)
    if (flag == f) return true;
  return false;
}
// A flag of Arch::implied_flags of some architecture: nullopt when `name` is none, else whether value v agrees with
// architecture a (1 where a implies it, 0 where it does not).
std::optional<bool> implied_flag_agrees(const Arch& a, std::string_view name, const ParamValue& v) {
  bool known = false;
  for (const Arch* b : architectures()) known = known || implies(*b, name);
  if (!known) return std::nullopt;
  return v.integer && v.i == (implies(a, name) ? 1 : 0);
}

void validate_params(const Arch& arch, const ModelConfig& c, const std::string& where) {
  for (const auto& [name, v] : c.params) {
    const ParamSpec* p = find_param(arch, name);
    if (!p) {
      if (const auto agrees = implied_flag_agrees(arch, name, v)) {
        if (*agrees) continue;
        fail("model", where, ": config field ", name, " = ", v.value(), " contradicts architecture ", arch.name,
             ", which ", implies(arch, name) ? "implies it" : "does not have it", " (the file is corrupt or edited)");
      }
      if (legacy_noop(name, v)) continue;
      std::string known;
      for (const ParamSpec* q : arch.params) known += (known.empty() ? "" : ", ") + std::string(q->name);
      fail("model", where, ": config parameter ", name, " is not a parameter of architecture ", arch.name, " (",
           known.empty() ? std::string("it has none") : "it has " + known, ")");
    }
    const double x = v.value();
    if (p->integer && !v.integer) fail("model", where, ": config field ", name, " = ", x, " is not an integer");
    if (p->zero_allowed && x == 0.0) continue;
    if (!(x >= p->lo && x <= p->hi)) {
      if (p->integer)
        fail("model", where, ": config field ", name, " = ", v.i, " is outside [", static_cast<int64_t>(p->lo), ", ",
             static_cast<int64_t>(p->hi), "]", p->zero_allowed ? " (or 0)" : "");
      fail("model", where, ": config field ", name, " = ", v.f, " is outside [", p->lo, ", ", p->hi, "]",
           p->zero_allowed ? " (or 0)" : "");
    }
  }
}
}  // namespace

namespace {
const ParamSpec& named_param(const ModelConfig& c, std::string_view name) {
  const Arch& a = arch_of(c.arch, "config");
  if (const ParamSpec* p = find_param(a, name)) return *p;
  fail("model", "architecture ", a.name, " has no parameter ", name);
}
}  // namespace

double param_named(const ModelConfig& c, std::string_view name) {
  const ParamSpec& p = named_param(c, name);
  return p.integer ? static_cast<double>(param_int(c, p)) : static_cast<double>(param(c, p));
}

void set_param_named(ModelConfig* c, std::string_view name, double v) { set_param(c, named_param(*c, name), v); }

std::string describe_params(const ModelConfig& c) {
  const Arch* a = find_arch(c.arch);
  if (!a) return "";
  std::ostringstream os;
  for (const ParamSpec* p : a->params) {
    const std::string name = p->name;
    os << "  " << name << std::string(name.size() < 16 ? 16 - name.size() : 1, ' ');
    if (p->integer)
      os << param_int(c, *p);
    else
      os << param(c, *p);
    os << " (" << p->what << ")\n";
  }
  if (a->describe) {
    const ModelDesc d = a->describe(c);
    std::string names;
    if (!d.layers.empty())
      for (const Step& st : d.layers[0].steps)
        for (const StepNorm& n : step_norms(st, d.dim))
          names += (names.empty() ? "" : ", ") + n.norm->weight.substr(n.norm->weight.find('.', 7) + 1);
    os << "  layer norms     " << names << " (layer 0)\n";
  }
  return os.str();
}

void validate_config(const ModelConfig& c, const std::string& where) {
  const Arch& arch = arch_of(c.arch, where);
  validate_config_fields(c, where);
  validate_params(arch, c, where);
  if (arch.validate) arch.validate(c, where);
}

void drop_legacy_params(ModelConfig* c) {
  const Arch* arch = find_arch(c->arch);
  if (!arch) return;
  std::erase_if(c->params, [&](const auto& kv) {
    return !find_param(*arch, kv.first) &&
           (implied_flag_agrees(*arch, kv.first, kv.second).value_or(false) || legacy_noop(kv.first, kv.second));
  });
}

ModelDesc describe_model(const ModelConfig& c) {
  const Arch& a = arch_of(c.arch, "describe");
  ANELAB_CHECK(a.describe != nullptr, "model", "architecture ", c.arch, " has no layer description (Arch::describe)");
  return a.describe(c);
}

const Arch& arch_for_hf(const nlohmann::json& j, const std::string& where) {
  if (j.contains("model_type") && j["model_type"].is_string()) {
    const std::string t = j["model_type"].get<std::string>();
    for (const Arch* a : architectures())
      for (const auto& m : a->hf_model_types)
        if (m == t) return *a;
    fail("model", where, ": model_type ", t, " is not supported (", arch_names(), ")");
  }
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string()) {
    const std::string cls = j["architectures"][0].get<std::string>();
    for (const Arch* a : architectures())
      for (const auto& p : a->hf_class_prefixes)
        if (cls.starts_with(p)) return *a;
    fail("model", where, ": architectures[0] ", cls, " is not supported (", arch_names(), ")");
  }
  fail("model", where, ": config.json names no model_type/architectures; cannot tell the architecture");
}

}  // namespace anelab::models
