#include "models/grammar/json_schema.h"

#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "framework/core/error.h"

namespace anelab::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// The shared rules, added once each when a schema needs them.
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> p = {
      {"space", R"(" "?)"},
      {"char", R"([^"\\\x00-\x1F\x7F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
      {"string", R"("\"" char* "\"")"},
      {"int-part", R"("0" | [1-9] [0-9]{0,15})"},
      {"integer", R"("-"? int-part)"},
      {"number", R"("-"? int-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?)"},
      {"boolean", R"("true" | "false")"},
      {"null", R"("null")"},
      {"value", R"(object | array | string | number | boolean | null)"},
      {"object", R"("{" (string ":" space value ("," space string ":" space value)*)? "}")"},
      {"array", R"("[" (value ("," space value)*)? "]")"},
  };
  return p;
}
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> d = {
      {"string", {"char"}},
      {"integer", {"int-part"}},
      {"number", {"int-part"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"string", "space", "value"}},
      {"array", {"value", "space"}},
  };
  return d;
}

std::string literal(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

class Converter {
 public:
  explicit Converter(const ojson& root) : root_(root) {}

  std::string run() {
    const std::string body = visit(root_, "root", "#");
    std::string out = "root ::= " + body + "\n";
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out;
  }

 private:
  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    fail("json_schema", "at ", path, ": ", what);
  }

  std::string use(const std::string& prim) {
    if (!rules_.count(prim)) {
      rules_[prim] = primitives().at(prim);
      auto d = primitive_deps().find(prim);
      if (d != primitive_deps().end())
        for (const auto& dep : d->second) use(dep);
    }
    return prim;
  }

  std::string fresh(const std::string& hint) {
    std::string base;
    for (const char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty()) base = "r";
    std::string name = base;
    for (int i = 2; rules_.count(name) || primitives().count(name) || name == "root"; ++i)
      name = base + "-" + std::to_string(i);
    rules_[name] = "";  // reserved
    return name;
  }

  std::string rule(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    rules_[name] = body;
    return name;
  }

  static bool is_annotation(const std::string& k) {
    static const std::set<std::string> a = {"title",    "description", "default",   "examples", "$schema",
                                            "$id",      "$comment",    "strict",    "$defs",    "definitions",
                                            "readOnly", "writeOnly",   "deprecated"};
    return a.count(k) > 0;
  }

  // A GBNF expression for `s` (a rule name or a parenthesised body).
  std::string visit(const ojson& s, const std::string& hint, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return use("value");
      bad(path, "the schema `false` matches nothing");
    }
    if (!s.is_object()) bad(path, "a schema must be an object or a boolean, got " + s.dump());
    static const std::set<std::string> known = {"type",
                                                "enum",
                                                "const",
                                                "properties",
                                                "required",
                                                "additionalProperties",
                                                "items",
                                                "prefixItems",
                                                "minItems",
                                                "maxItems",
                                                "minLength",
                                                "maxLength",
                                                "anyOf",
                                                "oneOf",
                                                "allOf",
                                                "$ref",
                                                "minimum",
                                                "maximum",
                                                "exclusiveMinimum",
                                                "exclusiveMaximum"};
    for (const auto& [k, v] : s.items())
      if (!known.count(k) && !is_annotation(k))
        bad(path, "keyword '" + k + "' is not supported (anelab's grammar cannot enforce it)");

    if (s.contains("$ref")) return ref(s["$ref"], path);
    if (s.contains("const")) return literal(s["const"].dump());
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) bad(path + "/enum", "enum must be a non-empty array");
      std::string body;
      for (const auto& v : e) body += (body.empty() ? "" : " | ") + literal(v.dump());
      return rule(hint, body);
    }
    for (const char* k : {"anyOf", "oneOf"})
      if (s.contains(k)) {
        const ojson& a = s[k];
        if (!a.is_array() || a.empty()) bad(path + "/" + k, std::string(k) + " must be a non-empty array");
        std::string body;
        for (size_t i = 0; i < a.size(); ++i)
          body +=
              (i ? " | " : "") + visit(a[i], hint + "-" + std::to_string(i), path + "/" + k + "/" + std::to_string(i));
        return rule(hint, body);
      }
    if (s.contains("allOf")) {
      const ojson& a = s["allOf"];
      if (!a.is_array() || a.size() != 1) bad(path + "/allOf", "allOf is supported with exactly one schema");
      return visit(a[0], hint, path + "/allOf/0");
    }
    if (s.contains("type") && s["type"].is_array()) {
      std::string body;
      for (const auto& t : s["type"]) {
        ojson one = s;
        one["type"] = t;
        body += (body.empty() ? "" : " | ") + visit(one, hint, path);
      }
      if (body.empty()) bad(path + "/type", "type must not be an empty list");
      return rule(hint, body);
    }
    std::string type;
    if (s.contains("type")) {
      if (!s["type"].is_string()) bad(path + "/type", "type must be a string or a list of strings");
      type = s["type"].get<std::string>();
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      type = "object";
    } else if (s.contains("items") || s.contains("prefixItems")) {
      type = "array";
    }
    const bool ranged = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                        s.contains("exclusiveMaximum");
    if (ranged && (type == "number" || type.empty()))  // (on strings, booleans, ... they constrain nothing)
      bad(path, "minimum / maximum / exclusiveMinimum / exclusiveMaximum are supported on integers only (type '" +
                    (type.empty() ? std::string("any") : type) + "')");
    if (type.empty()) return use("value");
    if (type == "string") return string_rule(s, hint, path);
    if (type == "integer" && ranged) return integer_range(s, hint, path);
    if (type == "integer" || type == "number" || type == "boolean" || type == "null") return use(type);
    if (type == "object") return object_rule(s, hint, path);
    if (type == "array") return array_rule(s, hint, path);
    bad(path + "/type", "unknown type '" + type + "'");
  }

  static int64_t count(const ojson& s, const char* key, const std::string& path, int64_t def) {
    if (!s.contains(key)) return def;
    if (!s[key].is_number_unsigned() && !(s[key].is_number_integer() && s[key].get<int64_t>() >= 0))
      bad(path + "/" + key, std::string(key) + " must be a non-negative integer, got " + s[key].dump());
    const int64_t v = s[key].get<int64_t>();
    if (v > 10000) bad(path + "/" + key, std::string(key) + " over 10000 is not supported");
    return v;
  }

  // An integer in [lo, hi] (JSON Schema's minimum / maximum, the exclusive ones moved in by one; fractional bounds
  // rounded inward), in the digits the `integer` rule writes: no leading zero, no "-0", at most 16 digits, so an
  // open side stops at -(10^16 - 1) or 10^16 - 1.
  std::string integer_range(const ojson& s, const std::string& hint, const std::string& path) {
    constexpr int64_t kMax = 9999999999999999;  // 16 digits
    int64_t lo = -kMax, hi = kMax;
    auto bound = [&](const char* key, bool upper, bool exclusive) {
      if (!s.contains(key)) return;
      const ojson& v = s[key];
      if (!v.is_number()) bad(path + "/" + key, std::string(key) + " must be a number, got " + v.dump());
      const double x = v.get<double>();
      if (!std::isfinite(x) || std::fabs(x) > 1e16) bad(path + "/" + key, std::string(key) + " beyond 16 digits");
      int64_t b;
      if (upper) {
        b = static_cast<int64_t>(std::floor(x));
        if (exclusive && static_cast<double>(b) == x) --b;
        hi = std::min(hi, b);
      } else {
        b = static_cast<int64_t>(std::ceil(x));
        if (exclusive && static_cast<double>(b) == x) ++b;
        lo = std::max(lo, b);
      }
    };
    bound("minimum", false, false);
    bound("exclusiveMinimum", false, true);
    bound("maximum", true, false);
    bound("exclusiveMaximum", true, true);
    if (lo > hi) bad(path, "no integer lies between the minimum and the maximum");
    std::string body;
    auto alt = [&](const std::string& a) { body += (body.empty() ? "" : " | ") + a; };
    if (lo < 0) alt("\"-\" (" + natural_range(hi < 0 ? -hi : 1, -lo) + ")");
    if (hi >= 0) alt(natural_range(std::max<int64_t>(lo, 0), hi));
    return rule(hint, body);
  }

  // The decimal numbers a..b (0 <= a <= b), without leading zeros: one alternative per digit count.
  static std::string natural_range(int64_t a, int64_t b) {
    std::string out;
    int64_t low = 0, high = 9;  // the numbers of this many digits
    for (; low <= b; low = high + 1, high = high * 10 + 9) {
      const int64_t x = std::max(a, low), y = std::min(b, high);
      if (x > y) continue;
      out += (out.empty() ? "" : " | ") + same_length(std::to_string(x), std::to_string(y));
    }
    return out;
  }

  // The digit strings of one length from lo to hi (lo <= hi): a shared first digit, then the rest; otherwise lo's
  // first digit with the rest from lo's up, the digits between with any rest, hi's first with the rest up to hi's.
  static std::string same_length(const std::string& lo, const std::string& hi) {
    const size_t n = lo.size();
    if (lo == hi) return "\"" + lo + "\"";
    const bool all_low = lo.find_first_not_of('0', 1) == std::string::npos;
    const bool all_high = hi.find_first_not_of('9', 1) == std::string::npos;
    const std::string rest_any = n > 1 ? " [0-9]{" + std::to_string(n - 1) + "}" : "";
    if (all_low && all_high) return "[" + lo.substr(0, 1) + "-" + hi.substr(0, 1) + "]" + rest_any;
    if (lo[0] == hi[0]) return "\"" + lo.substr(0, 1) + "\" (" + same_length(lo.substr(1), hi.substr(1)) + ")";
    std::string out = "\"" + lo.substr(0, 1) + "\" (" + same_length(lo.substr(1), std::string(n - 1, '9')) + ")";
    if (hi[0] - lo[0] > 1)
      out += " | [" + std::string(1, static_cast<char>(lo[0] + 1)) + "-" +
             std::string(1, static_cast<char>(hi[0] - 1)) + "]" + rest_any;
    return out + " | \"" + hi.substr(0, 1) + "\" (" + same_length(std::string(n - 1, '0'), hi.substr(1)) + ")";
  }

  std::string string_rule(const ojson& s, const std::string& hint, const std::string& path) {
    const int64_t lo = count(s, "minLength", path, 0), hi = count(s, "maxLength", path, -1);
    if (hi >= 0 && hi < lo) bad(path, "maxLength is below minLength");
    if (lo == 0 && hi < 0) return use("string");
    use("char");
    return rule(hint, "\"\\\"\" char{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "} \"\\\"\"");
  }

  std::string object_rule(const ojson& s, const std::string& hint, const std::string& path) {
    const bool extra = s.contains("additionalProperties") &&
                       !(s["additionalProperties"].is_boolean() && !s["additionalProperties"].get<bool>());
    const bool listed = s.contains("properties") && !s["properties"].empty();
    if (extra && listed)
      bad(path + "/additionalProperties",
          "additionalProperties other than false together with properties is not supported (list every key)");
    use("space");
    if (extra) {  // a map: any keys, values of the given schema
      const std::string v = s["additionalProperties"].is_boolean()
                                ? use("value")
                                : visit(s["additionalProperties"], hint + "-value", path + "/additionalProperties");
      use("string");
      return rule(hint, "\"{\" (string \":\" space " + v + " (\",\" space string \":\" space " + v + ")*)? \"}\"");
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) bad(path + "/required", "required must be an array of strings");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) bad(path + "/required", "required must be an array of strings");
        if (!listed || !s["properties"].contains(r.get<std::string>()))
          bad(path + "/required", "required property '" + r.get<std::string>() + "' is not in properties");
        required.insert(r.get<std::string>());
      }
    }
    if (!listed) return s.contains("additionalProperties") ? rule(hint, "\"{\" \"}\"") : use("object");
    if (!s["properties"].is_object()) bad(path + "/properties", "properties must be an object");
    std::vector<std::pair<std::string, std::string>> req, opt;  // (key, kv rule)
    for (const auto& [k, v] : s["properties"].items()) {
      const std::string kv = rule(hint + "-" + k + "-kv", literal(ojson(k).dump()) + " \":\" space " +
                                                              visit(v, hint + "-" + k, path + "/properties/" + k));
      (required.count(k) ? req : opt).emplace_back(k, kv);
    }
    std::string body = "\"{\" ";
    if (!req.empty()) {
      for (size_t i = 0; i < req.size(); ++i) body += (i ? "\",\" space " : "") + req[i].second + " ";
      for (const auto& o : opt) body += "(\",\" space " + o.second + ")? ";
    } else {
      // No required key: the first present optional key i, then any of the later ones, each after a comma.
      std::string alts;
      for (size_t i = 0; i < opt.size(); ++i) {
        std::string a = opt[i].second;
        for (size_t j = i + 1; j < opt.size(); ++j) a += " (\",\" space " + opt[j].second + ")?";
        alts += (i ? " | " : "") + a;
      }
      body += "(" + alts + ")? ";
    }
    return rule(hint, body + "\"}\"");
  }

  std::string array_rule(const ojson& s, const std::string& hint, const std::string& path) {
    use("space");
    const int64_t lo = count(s, "minItems", path, 0), hi = count(s, "maxItems", path, -1);
    if (hi >= 0 && hi < lo) bad(path, "maxItems is below minItems");
    if (s.contains("prefixItems")) {
      const ojson& p = s["prefixItems"];
      if (!p.is_array() || p.empty()) bad(path + "/prefixItems", "prefixItems must be a non-empty array");
      if (s.contains("items") && !(s["items"].is_boolean() && !s["items"].get<bool>()))
        bad(path + "/items", "items other than false together with prefixItems is not supported");
      const auto n = static_cast<int64_t>(p.size());
      if (n < lo || (hi >= 0 && n > hi)) bad(path, "prefixItems does not fit minItems/maxItems");
      std::string body = "\"[\" ";
      for (size_t i = 0; i < p.size(); ++i)
        body += (i ? "\",\" space " : "") +
                visit(p[i], hint + "-" + std::to_string(i), path + "/prefixItems/" + std::to_string(i)) + " ";
      return rule(hint, body + "\"]\"");
    }
    const std::string item = s.contains("items") ? visit(s["items"], hint + "-item", path + "/items") : use("value");
    if (hi == 0) return rule(hint, "\"[\" \"]\"");
    const std::string more = "(\",\" space " + item + ")";
    const std::string rest =
        more + "{" + std::to_string(lo > 0 ? lo - 1 : 0) + "," + (hi >= 0 ? std::to_string(hi - 1) : "") + "}";
    if (lo > 0) return rule(hint, "\"[\" " + item + " " + rest + " \"]\"");
    return rule(hint, "\"[\" (" + item + " " + rest + ")? \"]\"");
  }

  std::string ref(const ojson& r, const std::string& path) {
    if (!r.is_string()) bad(path + "/$ref", "$ref must be a string");
    const std::string target = r.get<std::string>();
    auto it = refs_.find(target);
    if (it != refs_.end()) return it->second;
    std::string name;
    const ojson* def = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.rfind(p, 0) == 0) {
        name = target.substr(p.size());
        const std::string key = p.substr(2, p.size() - 3);
        if (root_.contains(key) && root_[key].contains(name)) def = &root_[key][name];
      }
    }
    if (!def) bad(path + "/$ref", "$ref '" + target + "' does not name an entry of #/$defs or #/definitions");
    const std::string rname = fresh("ref-" + name);
    refs_[target] = rname;  // before visiting: recursive schemas refer to the rule by name
    rules_[rname] = visit(*def, rname + "-body", target);
    return rname;
  }

  const ojson& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return Converter(schema).run(); }

std::string json_object_gbnf() { return Converter(nlohmann::ordered_json::parse(R"({"type": "object"})")).run(); }

}  // namespace anelab::grammar
