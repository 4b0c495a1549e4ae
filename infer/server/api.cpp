#include "infer/server/api.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <set>

#include "infer/params_check.h"
#include "models/grammar/gbnf.h"
#include "models/grammar/json_schema.h"

namespace anelab::serve {
namespace {

using nlohmann::json;

// Known OpenAI fields this server accepts and ignores.
const std::set<std::string, std::less<>> kIgnoredFields = {"user", "store", "metadata", "service_tier",
                                                           "parallel_tool_calls"};

ApiError bad(std::string msg, std::string param = "", std::string code = "") {
  return ApiError{400, std::move(msg), "invalid_request_error", std::move(param), std::move(code)};
}

const char* type_name(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

ApiError wrong_type(const std::string& field, const char* want, const json& v) {
  return bad("'" + field + "' must be " + want + " (got " + type_name(v) + ")", field);
}

// Each getter returns an error or fills `out`; null counts as absent.
std::optional<ApiError> get_number(const json& o, const char* f, double lo, double hi, double& out) {
  auto it = o.find(f);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return wrong_type(f, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad("'" + std::string(f) + "' must be between " + json(lo).dump() + " and " + json(hi).dump(), f);
  out = v;
  return std::nullopt;
}

// A field of the shared parameter table (infer/params_check.h): "'top_p' must be in (0, 1] (got 0)".
std::optional<ApiError> get_param(const json& o, const infer::ParamRange& r, double& out) {
  auto it = o.find(r.name);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return wrong_type(r.name, "a number", *it);
  const double v = it->get<double>();
  if (std::string e = infer::range_error(r, v, it->dump()); !e.empty())
    return bad("'" + std::string(r.name) + "' " + e, r.name);
  out = v;
  return std::nullopt;
}

std::optional<ApiError> get_int(const json& o, const char* f, int64_t lo, int64_t hi, int64_t& out,
                                bool* set = nullptr) {
  auto it = o.find(f);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return wrong_type(f, "an integer", *it);
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi))
    return bad("'" + std::string(f) + "' must be at most " + std::to_string(hi), f);
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    return bad("'" + std::string(f) + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), f);
  out = v;
  if (set) *set = true;
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& o, const char* f, bool& out) {
  auto it = o.find(f);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return wrong_type(f, "a boolean", *it);
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> get_string(const json& o, const char* f, std::string& out) {
  auto it = o.find(f);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return wrong_type(f, "a string", *it);
  out = it->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> parse_seed(const json& o, CompletionRequest& r) {
  auto it = o.find("seed");
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return wrong_type("seed", "an integer", *it);
  if (!it->is_number_unsigned() && it->get<int64_t>() < 0) return bad("'seed' must be >= 0", "seed");
  r.seed = it->get<uint64_t>();
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& o, const Limits& lim, CompletionRequest& r) {
  auto it = o.find("stop");
  if (it == o.end() || it->is_null()) return std::nullopt;
  std::vector<json> items;
  if (it->is_string())
    items.push_back(*it);
  else if (it->is_array())
    items.assign(it->begin(), it->end());
  else
    return wrong_type("stop", "a string or an array of strings", *it);
  if (items.size() > lim.max_stop)
    return bad("'stop' has more than " + std::to_string(lim.max_stop) + " entries", "stop");
  for (const auto& s : items) {
    if (!s.is_string()) return wrong_type("stop", "a string or an array of strings", s);
    const auto& str = s.get_ref<const std::string&>();
    if (str.empty()) return bad("'stop' strings must not be empty", "stop");
    if (str.size() > lim.max_stop_bytes)
      return bad("'stop' string longer than " + std::to_string(lim.max_stop_bytes) + " bytes", "stop");
    r.stop.push_back(str);
  }
  return std::nullopt;
}

// Fields that exist in the OpenAI API but whose non-default values this server cannot honour.
std::optional<ApiError> check_unsupported(const json& o, Endpoint ep) {
  auto unsupported = [](const std::string& f) {
    return bad("'" + f + "' is not supported by this server", f, "unsupported_parameter");
  };
  int64_t n = 1;
  if (auto e = get_int(o, "n", 1, 1, n)) return bad("'n' must be 1 (one choice per request)", "n");
  if (ep == Endpoint::kCompletions) {
    int64_t best_of = 1;
    if (auto e = get_int(o, "best_of", 1, 1, best_of)) return bad("'best_of' must be 1", "best_of");
    if (auto it = o.find("suffix");
        it != o.end() && !it->is_null() && !(it->is_string() && it->get_ref<const std::string&>().empty()))
      return unsupported("suffix");
  } else {
    if (auto it = o.find("function_call"); it != o.end() && !it->is_null() && !(it->is_string() && *it == "none"))
      return unsupported("function_call");
    if (auto it = o.find("functions"); it != o.end() && !it->is_null() && !(it->is_array() && it->empty()))
      return unsupported("functions");
    if (auto it = o.find("tool_choice"); it != o.end() && !it->is_null()) {
      const bool word = it->is_string() && (*it == "none" || *it == "auto" || *it == "required");
      const bool named = it->is_object() && it->value("type", json()) == "function" && it->contains("function") &&
                         (*it)["function"].is_object() && (*it)["function"].contains("name") &&
                         (*it)["function"]["name"].is_string();
      if (!word && !named)
        return bad(
            "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
            "{\"name\": ...}}",
            "tool_choice");
    }
  }
  if (auto it = o.find("logit_bias"); it != o.end() && !it->is_null()) {
    if (!it->is_object()) return wrong_type("logit_bias", "an object", *it);
    if (!it->empty()) return unsupported("logit_bias");
  }
  if (auto it = o.find("stream_options"); it != o.end() && !it->is_null() && !it->is_object())
    return wrong_type("stream_options", "an object", *it);
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& o, CompletionRequest& r) {
  auto it = o.find("prompt");
  if (it == o.end() || it->is_null()) return bad("missing 'prompt' field", "prompt");
  if (it->is_string()) {
    r.prompt = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) return wrong_type("prompt", "a string, an array of one string or an array of token ids", *it);
  if (it->empty()) return bad("'prompt' must not be an empty array", "prompt");
  if ((*it)[0].is_string()) {
    if (it->size() != 1) return bad("'prompt' holds several prompts; send one per request", "prompt");
    r.prompt = (*it)[0].get<std::string>();
    return std::nullopt;
  }
  for (const auto& v : *it) {
    if (!v.is_number_integer()) return bad("'prompt' array must hold one string or token ids (integers)", "prompt");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return bad("'prompt' token id out of range", "prompt");
    r.prompt_ids.push_back(v.get<int64_t>());
  }
  r.prompt_is_ids = true;
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& o, const Limits& lim, CompletionRequest& r) {
  auto it = o.find("messages");
  if (it == o.end() || it->is_null()) return bad("missing 'messages' field", "messages");
  if (!it->is_array()) return wrong_type("messages", "an array", *it);
  if (it->empty()) return bad("'messages' must not be empty", "messages");
  if (it->size() > lim.max_messages)
    return bad("more than " + std::to_string(lim.max_messages) + " messages", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return wrong_type(p, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return bad(p + ".role must be a string", p + ".role");
    Message msg{role->get<std::string>(), ""};
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      return bad(p + ".role '" + msg.role + "' is not one of system, user, assistant, tool", p + ".role");
    for (auto f = m.begin(); f != m.end(); ++f)
      if (f.key() != "role" && f.key() != "content" && f.key() != "name" && f.key() != "tool_call_id" &&
          f.key() != "tool_calls")
        return bad("unrecognized field " + p + "." + f.key(), p + "." + f.key());
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (msg.role != "assistant" || !tc->is_array())
        return bad(p + ".tool_calls must be an array on an assistant message", p + ".tool_calls");
      for (size_t k = 0; k < tc->size(); ++k) {
        const json& c = (*tc)[k];
        const std::string q = p + ".tool_calls[" + std::to_string(k) + "]";
        const json* fn = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
        if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
          return bad(q + ".function.name must be a string", q + ".function");
        ToolCallText call{(*fn)["name"].get<std::string>(), "{}"};
        if (fn->contains("arguments") && !(*fn)["arguments"].is_null()) {
          const json& a = (*fn)["arguments"];  // OpenAI sends a JSON text; an object is taken as is
          nlohmann::ordered_json parsed = a.is_string()
                                              ? nlohmann::ordered_json::parse(a.get<std::string>(), nullptr, false)
                                              : nlohmann::ordered_json::parse(a.dump());
          if (parsed.is_discarded()) return bad(q + ".function.arguments is not JSON", q + ".function.arguments");
          call.arguments = python_json(parsed);
        }
        msg.tool_calls.push_back(std::move(call));
      }
    }
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      if (msg.role != "assistant") return bad(p + ".content is required", p + ".content");
    } else if (c->is_string()) {
      msg.content = c->get<std::string>();
    } else if (c->is_array()) {
      for (const auto& part : *c) {
        if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
            !part["text"].is_string())
          return bad(p + ".content parts must be {\"type\": \"text\", \"text\": string}", p + ".content");
        msg.content += part["text"].get<std::string>();
      }
    } else {
      return wrong_type(p + ".content", "a string or an array of text parts", *c);
    }
    r.messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

// The chat template's thinking switch: "enable_thinking" (a top-level extension) or, as vLLM and llama.cpp's
// server take it, "chat_template_kwargs": {"enable_thinking": bool} (its only key here).
std::optional<ApiError> parse_thinking(const json& o, CompletionRequest& r) {
  if (auto e = get_bool(o, "enable_thinking", r.enable_thinking)) return e;
  auto it = o.find("chat_template_kwargs");
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return wrong_type("chat_template_kwargs", "an object", *it);
  for (auto k = it->begin(); k != it->end(); ++k)
    if (k.key() != "enable_thinking")
      return bad("'chat_template_kwargs' key '" + k.key() + "' is not supported (enable_thinking)",
                 "chat_template_kwargs");
  if (auto e = get_bool(*it, "enable_thinking", r.enable_thinking)) {
    e->param = "chat_template_kwargs.enable_thinking";
    return e;
  }
  return std::nullopt;
}

const std::set<std::string, std::less<>>& known_fields(Endpoint ep) {
  static const std::set<std::string, std::less<>> common = {"model",
                                                            "max_tokens",
                                                            "temperature",
                                                            "top_p",
                                                            "top_k",
                                                            "min_p",
                                                            "repeat_penalty",
                                                            "seed",
                                                            "stop",
                                                            "stream",
                                                            "stream_options",
                                                            "n",
                                                            "presence_penalty",
                                                            "frequency_penalty",
                                                            "logit_bias",
                                                            "logprobs",
                                                            "cache_prompt",
                                                            "lora"};
  static const std::set<std::string, std::less<>> comp = [] {
    auto s = common;
    s.insert({"prompt", "system", "echo", "suffix", "best_of", "response_format", "json_schema", "grammar"});
    return s;
  }();
  static const std::set<std::string, std::less<>> chat = [] {
    auto s = common;
    s.insert({"messages", "max_completion_tokens", "top_logprobs", "response_format", "tools", "tool_choice",
              "functions", "function_call", "enable_thinking", "chat_template_kwargs", "json_schema", "grammar"});
    return s;
  }();
  return ep == Endpoint::kChat ? chat : comp;
}

// Completions: logprobs (an integer 0..20: alternatives per token). Chat: logprobs (boolean) and top_logprobs
// (0..20, needs logprobs). Streamed answers carry each chunk's entries.
std::optional<ApiError> parse_logprobs(const json& o, Endpoint ep, CompletionRequest& r) {
  if (ep == Endpoint::kChat) {
    bool on = false;
    if (auto e = get_bool(o, "logprobs", on)) return e;
    int64_t top = 0;
    bool top_set = false;
    if (auto e = get_int(o, "top_logprobs", 0, 20, top, &top_set)) return e;
    if (top_set && !on) return bad("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (on) r.logprobs = top;
  } else {
    int64_t n = -1;
    if (auto e = get_int(o, "logprobs", 0, 20, n)) return e;
    r.logprobs = n;
  }
  return std::nullopt;
}

// Structured output: response_format (OpenAI), json_schema or grammar (llama.cpp), at most one; the schema is read
// from `ordered` (the body parsed keeping key order) so that properties come out in the order they are listed.
std::optional<ApiError> parse_structured(const json& o, const nlohmann::ordered_json* ordered, CompletionRequest& r) {
  std::string gbnf, field;
  auto present = [&](const char* f) { return o.contains(f) && !o[f].is_null(); };
  int given = 0;
  for (const char* f : {"response_format", "json_schema", "grammar"}) given += present(f);
  if (given > 1) return bad("send at most one of 'response_format', 'json_schema' and 'grammar'", "response_format");
  try {
    if (present("grammar")) {
      field = "grammar";
      if (!o["grammar"].is_string()) return wrong_type("grammar", "a string (GBNF)", o["grammar"]);
      gbnf = o["grammar"].get<std::string>();
      if (gbnf.empty()) return std::nullopt;  // llama.cpp: "" is no grammar
    } else if (present("json_schema")) {
      field = "json_schema";
      if (!o["json_schema"].is_object())
        return wrong_type("json_schema", "an object (a JSON schema)", o["json_schema"]);
      gbnf = grammar::json_schema_to_gbnf(ordered->at("json_schema"));
    } else if (present("response_format")) {
      field = "response_format";
      const json& f = o["response_format"];
      if (!f.is_object()) return wrong_type("response_format", "an object", f);
      auto t = f.find("type");
      if (t == f.end() || !t->is_string())
        return bad("'response_format.type' must be one of text, json_object, json_schema", "response_format.type");
      if (*t == "text") return std::nullopt;
      if (*t == "json_object") {
        gbnf = grammar::json_object_gbnf();
      } else if (*t == "json_schema") {
        field = "response_format.json_schema";
        auto js = f.find("json_schema");
        if (js == f.end() || !js->is_object())
          return bad("'response_format.json_schema' must be an object {name, schema, strict}", field);
        for (auto k = js->begin(); k != js->end(); ++k)
          if (k.key() != "name" && k.key() != "schema" && k.key() != "strict" && k.key() != "description")
            return bad("unrecognized field response_format.json_schema." + k.key(), field + "." + k.key());
        if (!js->contains("schema") || (*js)["schema"].is_null()) {
          gbnf = grammar::json_object_gbnf();
        } else {
          field += ".schema";
          if (!(*js)["schema"].is_object()) return wrong_type(field, "an object (a JSON schema)", (*js)["schema"]);
          gbnf = grammar::json_schema_to_gbnf(ordered->at("response_format").at("json_schema").at("schema"));
        }
      } else {
        return bad("'response_format.type' must be one of text, json_object, json_schema (got " + t->dump() + ")",
                   "response_format.type");
      }
    } else {
      return std::nullopt;
    }
    r.grammar = std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(gbnf));
  } catch (const std::exception& e) {
    return bad("'" + field + "': " + e.what(), field,
               "invalid_" + std::string(field == "grammar" ? "grammar" : "schema"));
  }
  return std::nullopt;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}], printed as the templates'
// tojson prints each (from `ordered`, the body in its key order); tool_choice "none" drops them.
std::optional<ApiError> parse_tools(const json& o, const nlohmann::ordered_json* ordered, CompletionRequest& r) {
  auto it = o.find("tools");
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return wrong_type("tools", "an array", *it);
  if (o.contains("tool_choice") && o["tool_choice"] == "none") return std::nullopt;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string p = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") ||
        !t["function"].is_object())
      return bad(p + " must be {\"type\": \"function\", \"function\": {...}}", p);
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      return bad(p + ".function.name must be a non-empty string", p + ".function.name");
    for (const char ch : f["name"].get<std::string>())
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.')
        return bad(p + ".function.name may hold letters, digits, '_', '-' and '.' only", p + ".function.name");
    if (f.contains("parameters") && !f["parameters"].is_object())
      return wrong_type(p + ".function.parameters", "an object (a JSON schema)", f["parameters"]);
    r.tools.push_back(python_json(ordered->at("tools").at(i)));
  }
  return std::nullopt;
}

// tool_choice "required" or a named function: the answer must be one <tool_call> of the tools (or that one), its
// arguments following the tool's parameters schema: a grammar over {"name": const, "arguments": parameters}.
std::optional<ApiError> parse_forced_tool(const json& o, const nlohmann::ordered_json* ordered, CompletionRequest& r) {
  auto it = o.find("tool_choice");
  if (it == o.end() || it->is_null() || (it->is_string() && *it != "required")) return std::nullopt;
  if (r.tools.empty()) return bad("'tool_choice' forces a call but 'tools' is empty", "tool_choice");
  if (r.grammar) return bad("a forced tool call cannot be combined with 'response_format' or 'grammar'", "tool_choice");
  const std::string want = it->is_object() ? (*it)["function"]["name"].get<std::string>() : "";
  nlohmann::ordered_json forced = nlohmann::ordered_json::object();
  for (const auto& t : ordered->at("tools")) {
    const auto& f = t.at("function");
    const std::string name = f.at("name").get<std::string>();
    if (!want.empty() && name != want) continue;
    forced[name] = f.contains("parameters") ? f["parameters"] : nlohmann::ordered_json{{"type", "object"}};
  }
  if (forced.empty()) return bad("'tool_choice' names function '" + want + "', which is not in 'tools'", "tool_choice");
  try {
    r.grammar = forced_tool_grammar(tok::ToolCallForm::kTagged, forced);
    r.forced_tools = std::move(forced);
  } catch (const std::exception& e) {
    return bad(std::string("'tools': a parameters schema cannot be enforced: ") + e.what(), "tools", "invalid_schema");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_object(Endpoint ep, const json& o, const Limits& lim, CompletionRequest& r,
                                     const nlohmann::ordered_json* ordered) {
  for (auto it = o.begin(); it != o.end(); ++it)
    if (!known_fields(ep).count(it.key()) && !kIgnoredFields.count(it.key()))
      return bad("Unrecognized request argument supplied: " + it.key(), it.key(), "unknown_parameter");
  r.endpoint = ep;
  if (auto e = get_string(o, "model", r.model)) return e;
  if (auto e = check_unsupported(o, ep)) return e;
  if (ep == Endpoint::kCompletions) {
    if (auto e = parse_prompt(o, r)) return e;
    std::string sys;
    if (o.contains("system") && !o["system"].is_null()) {
      if (auto e = get_string(o, "system", sys)) return e;
      r.system = sys;
    }
    if (auto e = get_bool(o, "echo", r.echo)) return e;
  } else {
    if (auto e = parse_messages(o, lim, r)) return e;
    if (auto e = parse_thinking(o, r)) return e;
    if (auto e = parse_tools(o, ordered, r)) return e;
  }
  r.max_tokens = lim.default_max_tokens;
  const char* mt =
      (ep == Endpoint::kChat && o.contains("max_completion_tokens") && !o["max_completion_tokens"].is_null())
          ? "max_completion_tokens"
          : "max_tokens";
  if (auto e = get_int(o, mt, 1, lim.max_tokens_cap, r.max_tokens, &r.max_tokens_set)) {
    e->code = "max_tokens_out_of_range";
    return e;
  }
  namespace P = infer::params;
  if (auto e = get_param(o, P::kTemperature, r.temperature)) return e;
  if (auto e = get_param(o, P::kTopP, r.top_p)) return e;
  if (auto e = get_param(o, P::kMinP, r.min_p)) return e;
  if (auto e = get_param(o, P::kRepeatPenalty, r.repeat_penalty)) return e;
  if (auto e = get_int(o, "top_k", static_cast<int64_t>(P::kTopK.lo), static_cast<int64_t>(P::kTopK.hi), r.top_k))
    return e;
  if (auto e = parse_logprobs(o, ep, r)) return e;
  if (auto e = get_bool(o, "cache_prompt", r.cache_prompt)) return e;
  if (auto it = o.find("lora"); it != o.end() && !it->is_null()) {
    r.lora.emplace();
    if (auto e = parse_lora_list(*it, "lora", *r.lora)) return e;
  }
  if (auto e = get_number(o, "frequency_penalty", -2.0, 2.0, r.frequency_penalty)) return e;
  if (auto e = get_number(o, "presence_penalty", -2.0, 2.0, r.presence_penalty)) return e;
  if (auto e = parse_seed(o, r)) return e;
  if (auto e = parse_stop(o, lim, r)) return e;
  if (auto e = get_bool(o, "stream", r.stream)) return e;
  if (auto it = o.find("stream_options"); it != o.end() && it->is_object())
    if (auto e = get_bool(*it, "include_usage", r.include_usage)) return e;
  if (auto e = parse_structured(o, ordered, r)) return e;
  return parse_forced_tool(o, ordered, r);
}

double tps(int64_t n, double ms) { return ms > 0 ? static_cast<double>(n) / (ms / 1e3) : 0.0; }

json meta_base(const ResponseMeta& m, bool chunk) {
  const bool chat = m.endpoint == Endpoint::kChat;
  return json{{"id", m.id},
              {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
              {"created", m.created},
              {"model", m.model}};
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace

// One pass over the text outside strings: the deepest nesting and the count of values and keys (each ',', ':', '['
// and '{' starts one more; the document itself is the first). Stops once either passes its cap.
JsonStructure json_structure(std::string_view t, int depth_cap, size_t element_cap) {
  JsonStructure r{0, 1};
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < t.size() && r.max_depth <= depth_cap && r.elements <= element_cap; ++i) {
    const char c = t[i];
    if (in_str) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      r.max_depth = std::max(r.max_depth, ++depth);
      ++r.elements;
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    } else if (c == ',' || c == ':') {
      ++r.elements;
    }
  }
  return r;
}

int json_depth(std::string_view t, int cap) { return json_structure(t, cap, SIZE_MAX).max_depth; }
size_t json_elements(std::string_view t, size_t cap) { return json_structure(t, INT_MAX, cap).elements; }

int64_t effective_max_tokens_cap(int64_t flag, int64_t context) { return flag > 0 ? std::min(flag, context) : context; }

// llama.cpp's /completion body -> the /v1/completions one. Its sampling fields keep their names; n_predict is
// max_tokens (-1 or absent: up to the cap and the context); seed -1 is random; fields that only steer llama.cpp's
// own machinery are ignored, like every unknown field there; samplers anelab lacks are refused unless neutral.
std::optional<ApiError> llama_to_openai(const json& o, const Limits& lim, json& c) {
  c = json::object();
  for (const char* f :
       {"prompt", "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "stop", "stream", "grammar",
        "json_schema", "response_format", "frequency_penalty", "presence_penalty", "cache_prompt", "lora"})
    if (o.contains(f)) c[f] = o[f];
  if (o.contains("seed") && !(o["seed"].is_number_integer() && o["seed"].get<int64_t>() == -1)) c["seed"] = o["seed"];
  if (auto it = o.find("n_predict"); it != o.end() && !it->is_null()) {
    if (!it->is_number_integer()) return wrong_type("n_predict", "an integer", *it);
    const int64_t n = it->get<int64_t>();
    if (n < -1 || n == 0) return bad("'n_predict' must be -1 (no limit) or at least 1", "n_predict");
    if (n > 0) c["max_tokens"] = std::min(n, lim.max_tokens_cap);
  }
  struct Neutral {
    const char* field;
    double value;
  };
  for (const Neutral& n :
       {Neutral{"n_probs", 0}, Neutral{"mirostat", 0}, Neutral{"typical_p", 1}, Neutral{"dynatemp_range", 0},
        Neutral{"xtc_probability", 0}, Neutral{"dry_multiplier", 0}, Neutral{"top_n_sigma", -1}}) {
    auto it = o.find(n.field);
    if (it == o.end() || it->is_null()) continue;
    if (!it->is_number()) return wrong_type(n.field, "a number", *it);
    if (it->get<double>() != n.value)
      return bad("'" + std::string(n.field) + "' is not supported by this server (only " + json(n.value).dump() + ")",
                 n.field, "unsupported_parameter");
  }
  if (auto it = o.find("ignore_eos"); it != o.end() && it->is_boolean() && it->get<bool>())
    return bad("'ignore_eos' is not supported by this server", "ignore_eos", "unsupported_parameter");
  return std::nullopt;
}

std::optional<ApiError> parse_lora_list(const json& v, const std::string& field, std::vector<LoraScale>& out) {
  const std::string name = field.empty() ? "the body" : "'" + field + "'";
  if (!v.is_array())
    return bad(name + " must be an array of {\"id\": integer, \"scale\": number} (got " + type_name(v) + ")", field);
  out.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = field + "[" + std::to_string(i) + "]";
    const json& x = v[i];
    if (!x.is_object()) return bad(p + " must be an object {\"id\": integer, \"scale\": number}", p);
    for (auto it = x.begin(); it != x.end(); ++it)
      if (it.key() != "id" && it.key() != "scale")
        return bad("unrecognized field " + p + "." + it.key(), p + "." + it.key());
    const auto id = x.find("id");
    if (id == x.end() || !id->is_number_integer() || (!id->is_number_unsigned() && id->get<int64_t>() < 0))
      return bad(p + ".id must be an integer >= 0 (an id of GET /lora-adapters)", p + ".id");
    const auto sc = x.find("scale");
    if (sc == x.end() || !sc->is_number() || !std::isfinite(static_cast<float>(sc->get<double>())))
      return bad(p + ".scale must be a finite number (an fp32 value)", p + ".scale");
    out.push_back({id->get<int64_t>(), sc->get<double>()});
  }
  return std::nullopt;
}

std::optional<ApiError> parse_lora_adapters(std::string_view body, const Limits& lim, std::vector<LoraScale>& out) {
  if (json_depth(body, lim.max_json_depth) > lim.max_json_depth || json_elements(body, 4096) > 4096)
    return bad("the body is too large for a list of LoRA scales");
  json o;
  try {
    o = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return bad(std::string("malformed JSON body: ") + e.what(), "", "invalid_json");
  }
  return parse_lora_list(o, "", out);
}

std::optional<ApiError> parse_request(Endpoint ep, std::string_view body, const Limits& lim, CompletionRequest& out) {
  out = CompletionRequest{};
  try {
    if (body.empty()) return bad("empty body: send a JSON object");
    if (json_depth(body, lim.max_json_depth) > lim.max_json_depth)
      return bad("JSON nested deeper than " + std::to_string(lim.max_json_depth) + " levels");
    if (json_elements(body, lim.max_json_elements) > lim.max_json_elements)
      return ApiError{413,
                      "JSON body has more than " + std::to_string(lim.max_json_elements) +
                          " values and keys (send a shorter prompt or fewer messages)",
                      "invalid_request_error", "", "payload_too_large"};
    json o;
    try {
      o = json::parse(body.begin(), body.end());
    } catch (const json::exception& e) {
      return bad(std::string("malformed JSON body: ") + e.what(), "", "invalid_json");
    }
    if (!o.is_object()) return bad(std::string("the body must be a JSON object (got ") + type_name(o) + ")");
    if (ep == Endpoint::kLlama) {
      json c;
      if (auto e = llama_to_openai(o, lim, c)) return e;
      std::optional<nlohmann::ordered_json> ordered;
      if (c.contains("json_schema") || c.contains("response_format")) {
        ordered = nlohmann::ordered_json::parse(body.begin(), body.end());
        for (auto it = ordered->begin(); it != ordered->end();)  // keep only the translated fields' order
          it = c.contains(it.key()) ? std::next(it) : ordered->erase(it);
      }
      auto e = parse_object(Endpoint::kCompletions, c, lim, out, ordered ? &*ordered : nullptr);
      out.endpoint = Endpoint::kLlama;
      if (!c.contains("max_tokens")) out.max_tokens = lim.max_tokens_cap;  // n_predict -1: until the cap / context
      return e;
    }
    // A schema keeps its key order (properties are generated in the order they are listed): parse it again.
    std::optional<nlohmann::ordered_json> ordered;
    if (o.contains("json_schema") || o.contains("response_format") || o.contains("tools"))
      ordered = nlohmann::ordered_json::parse(body.begin(), body.end());
    return parse_object(ep, o, lim, out, ordered ? &*ordered : nullptr);
  } catch (const std::exception& e) {  // e.g. invalid UTF-8 inside a string we copy out
    return bad(std::string("bad request: ") + e.what());
  }
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_json(const ApiError& e) {
  json err{{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return dump(json{{"error", err}});
}

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json timings_json(const Usage& u) {
  // decode tok/s over the tokens after the first (the first comes out of the prefill), as the CLI does.
  const double dec = u.completion_tokens > 1 ? tps(u.completion_tokens - 1, u.decode_ms) : 0.0;
  return json{
      {"queue_ms", u.queue_ms}, {"prefill_ms", u.prefill_ms}, {"decode_ms", u.decode_ms},
      {"ttft_ms", u.ttft_ms},   {"total_ms", u.total_ms},     {"prefill_tps", tps(u.prompt_tokens, u.prefill_ms)},
      {"decode_tps", dec},      {"draft_n", u.drafted},       {"draft_n_accepted", u.accepted}};
}

std::string python_json(const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      out += (first ? "" : ", ") + nlohmann::ordered_json(k).dump(-1, ' ', false, json::error_handler_t::replace) +
             ": " + python_json(v);
      first = false;
    }
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + python_json(j[i]);
    return out + "]";
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::shared_ptr<const grammar::Grammar> forced_tool_grammar(tok::ToolCallForm form,
                                                            const nlohmann::ordered_json& tools) {
  const bool bare = form == tok::ToolCallForm::kJson;
  nlohmann::ordered_json any = nlohmann::ordered_json::array();
  for (const auto& [name, params] : tools.items())
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", name}}}, {bare ? "parameters" : "arguments", params}}},
                   {"required", {"name", bare ? "parameters" : "arguments"}}});
  std::string g = grammar::json_schema_to_gbnf(nlohmann::ordered_json{{"anyOf", any}});
  g.replace(0, g.find("::="), "tool-call-json ");
  g = (bare ? "root ::= tool-call-json\n" : "root ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n") + g;
  return std::make_shared<const grammar::Grammar>(grammar::Grammar::parse(g));
}

namespace {
constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";

std::string trim_space(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}
}  // namespace

ParsedToolCalls parse_tool_calls(const std::string& text, tok::ToolCallForm form) {
  ParsedToolCalls out;
  if (form == tok::ToolCallForm::kJson) {
    const json j = json::parse(text, nullptr, false);  // spaces around it are allowed
    const char* args = j.is_object() && j.contains("parameters") ? "parameters" : "arguments";
    if (j.is_object() && j.size() <= 2 && j.contains("name") && j["name"].is_string() &&
        (!j.contains(args) || j[args].is_object()) && (j.size() == 1 || j.contains(args)))
      out.calls.push_back({j["name"].get<std::string>(), j.contains(args) ? dump(j[args]) : "{}"});
    else
      out.content = text;
    return out;
  }
  std::string rest;
  size_t at = 0;
  for (;;) {
    const size_t open = text.find(kCallOpen, at);
    if (open == std::string::npos) break;
    const size_t close = text.find(kCallClose, open);
    if (close == std::string::npos) break;
    const std::string body = text.substr(open + kCallOpen.size(), close - open - kCallOpen.size());
    const json j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("name") && j["name"].is_string() &&
        (!j.contains("arguments") || j["arguments"].is_object())) {
      rest += text.substr(at, open - at);
      out.calls.push_back({j["name"].get<std::string>(), j.contains("arguments") ? dump(j["arguments"]) : "{}"});
    } else {
      rest += text.substr(at, close + kCallClose.size() - at);  // not a call: kept as text
    }
    at = close + kCallClose.size();
  }
  rest += text.substr(at);
  out.content = out.calls.empty() ? text : trim_space(rest);
  return out;
}

size_t tool_call_holdback(std::string_view text, tok::ToolCallForm form) {
  if (form == tok::ToolCallForm::kJson) {
    const size_t b = text.find_first_not_of(" \t\r\n");
    return b == std::string_view::npos || text[b] == '{' ? 0 : text.size();
  }
  if (const size_t open = text.find(kCallOpen); open != std::string_view::npos) return open;
  for (size_t k = std::min(text.size(), kCallOpen.size() - 1); k > 0; --k)  // a tail that may start "<tool_call>"
    if (kCallOpen.substr(0, k) == text.substr(text.size() - k)) return text.size() - k;
  return text.size();
}

std::string text_before_calls(const std::string& text, tok::ToolCallForm form) {
  return form == tok::ToolCallForm::kJson ? "" : text.substr(0, text.find(kCallOpen));
}

std::string sse_tool_calls(const ResponseMeta& m, const std::vector<ToolCallText>& calls) {
  json j = meta_base(m, true);
  json tc = json::array();
  for (size_t i = 0; i < calls.size(); ++i)
    tc.push_back({{"index", i},
                  {"id", m.id + "-call-" + std::to_string(i)},
                  {"type", "function"},
                  {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  j["choices"] = json::array({json{{"index", 0}, {"delta", {{"tool_calls", tc}}}, {"finish_reason", nullptr}}});
  return sse(j);
}

json logprobs_json(Endpoint ep, const std::vector<TokenLogprobText>& lps) {
  auto bytes = [](const std::string& p) {
    json b = json::array();
    for (unsigned char c : p) b.push_back(c);
    return b;
  };
  if (ep == Endpoint::kChat) {
    json content = json::array();
    for (const auto& t : lps) {
      json top = json::array();
      for (const auto& [p, lp] : t.top) top.push_back({{"token", p}, {"logprob", lp}, {"bytes", bytes(p)}});
      content.push_back({{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes(t.piece)}, {"top_logprobs", top}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const auto& t : lps) {
    tokens.push_back(t.piece);
    token_lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [p, lp] : t.top)
      if (!top.contains(p)) top[p] = lp;  // two ids may print alike: the likelier one is kept
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.piece.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json completion_json(const ResponseMeta& m, const std::string& text, const std::string& finish, const Usage& u,
                     const json& logprobs) {
  json j = meta_base(m, false);
  json choice{{"index", 0}, {"finish_reason", finish}};
  if (m.endpoint == Endpoint::kChat && m.tools) {
    const ParsedToolCalls p = parse_tool_calls(text, m.tool_form);
    choice["message"] = json{{"role", "assistant"}, {"content", text}};
    if (!p.calls.empty()) {
      json tc = json::array();
      for (size_t i = 0; i < p.calls.size(); ++i)
        tc.push_back({{"id", m.id + "-call-" + std::to_string(i)},
                      {"type", "function"},
                      {"function", {{"name", p.calls[i].name}, {"arguments", p.calls[i].arguments}}}});
      choice["message"] = json{
          {"role", "assistant"}, {"content", p.content.empty() ? json(nullptr) : json(p.content)}, {"tool_calls", tc}};
      choice["finish_reason"] = "tool_calls";
    }
  } else if (m.endpoint == Endpoint::kChat) {
    choice["message"] = json{{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(u);
  const json t = timings_json(u);
  j["timings"] = t;
  // The seeds' simple-form fields.
  j["text"] = text;
  j["prompt_tokens"] = u.prompt_tokens;
  j["gen_tokens"] = u.completion_tokens;
  for (const char* k : {"prefill_tps", "decode_tps", "ttft_ms", "total_ms"}) j[k] = t[k];
  if (!m.note.empty()) j["note"] = m.note;
  return j;
}

std::string sse_delta(const ResponseMeta& m, std::string_view text, const json& logprobs) {
  json j = meta_base(m, true);
  json choice{{"index", 0}, {"finish_reason", nullptr}};
  if (m.endpoint == Endpoint::kChat) {
    choice["delta"] = json{{"content", std::string(text)}};
    if (!logprobs.is_null()) choice["logprobs"] = logprobs;
  } else {
    choice["text"] = std::string(text), choice["logprobs"] = logprobs;
  }
  j["choices"] = json::array({choice});
  return sse(j);
}

std::string sse_role(const ResponseMeta& m) {
  json j = meta_base(m, true);
  j["choices"] = json::array(
      {json{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}});
  return sse(j);
}

std::string sse_final(const ResponseMeta& m, const std::string& finish, const Usage& u, bool usage_chunk) {
  json j = meta_base(m, true);
  json choice{{"index", 0}, {"finish_reason", finish}};
  if (m.endpoint == Endpoint::kChat)
    choice["delta"] = json::object();
  else
    choice["text"] = "", choice["logprobs"] = nullptr;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(u);
  j["timings"] = timings_json(u);
  if (!m.note.empty()) j["note"] = m.note;
  std::string out = sse(j);
  if (usage_chunk) {  // stream_options.include_usage: OpenAI's extra chunk with empty choices
    json k = meta_base(m, true);
    k["choices"] = json::array();
    k["usage"] = usage_json(u);
    out += sse(k);
  }
  return out;
}

std::string sse_error(const ApiError& e) { return "data: " + error_json(e) + "\n\n"; }

namespace {
const char* llama_stop_type(const std::string& stop_reason) {
  if (stop_reason == "length" || stop_reason == "context") return "limit";
  if (stop_reason == "stop_string") return "word";
  return "eos";
}
}  // namespace

json llama_completion_json(const ResponseMeta& m, const std::string& text, const std::string& stop_reason,
                           const Usage& u) {
  const double pms = u.prefill_ms, dms = u.decode_ms;
  // llama.cpp's timings: prompt_n the prompt tokens evaluated, cache_n those taken from the prompt cache.
  const int64_t pn = u.prompt_tokens - u.cached_tokens, dn = u.completion_tokens;
  json t{{"cache_n", u.cached_tokens},
         {"prompt_n", pn},
         {"prompt_ms", pms},
         {"prompt_per_token_ms", pn > 0 ? pms / static_cast<double>(pn) : 0.0},
         {"prompt_per_second", tps(pn, pms)},
         {"predicted_n", dn},
         {"predicted_ms", dms},
         {"predicted_per_token_ms", dn > 0 ? dms / static_cast<double>(dn) : 0.0},
         {"predicted_per_second", tps(dn, dms)}};
  json j{{"content", text},
         {"stop", true},
         {"model", m.model},
         {"stop_type", llama_stop_type(stop_reason)},
         {"stopping_word", ""},
         {"tokens_predicted", dn},
         {"tokens_evaluated", u.prompt_tokens},
         {"tokens_cached", u.cached_tokens},
         {"truncated", false},
         {"timings", t}};
  if (!m.note.empty()) j["note"] = m.note;
  return j;
}

std::string llama_sse_delta(std::string_view text) {
  return sse(json{{"content", std::string(text)}, {"stop", false}});
}

std::string llama_sse_final(const ResponseMeta& m, const std::string& stop_reason, const Usage& u) {
  json j = llama_completion_json(m, "", stop_reason, u);
  return sse(j);
}

namespace {
// A small route's body: within the limits (counted before parsing), a JSON object; else the error naming `shape`.
std::optional<ApiError> parse_body_object(std::string_view body, const Limits& lim, const char* shape, json& o) {
  if (json_elements(body, lim.max_json_elements) > lim.max_json_elements ||
      json_depth(body, lim.max_json_depth) > lim.max_json_depth)
    return bad("JSON body too large or too deep");
  o = json::parse(body.begin(), body.end(), nullptr, false);
  if (!o.is_object()) return bad(std::string("the body must be a JSON object ") + shape);
  return std::nullopt;
}
}  // namespace

std::optional<ApiError> parse_slot_action(std::string_view path, std::string_view target, std::string_view body,
                                          const Limits& lim, SlotActionRequest& out) {
  out = SlotActionRequest{};
  const std::string_view id = path.substr(std::string_view("/slots/").size());
  if (id.empty() || id.size() > 6 || id.find_first_not_of("0123456789") != std::string_view::npos)
    return bad("id_slot '" + std::string(id) + "' in the path is not a slot number", "id_slot");
  out.slot = std::stoul(std::string(id));
  std::string_view action;
  if (const size_t q = target.find('?'); q != std::string_view::npos)
    for (std::string_view rest = target.substr(q + 1); !rest.empty();) {
      const size_t amp = rest.find('&');
      const std::string_view kv = rest.substr(0, amp);
      if (kv.substr(0, 7) == "action=") action = kv.substr(7);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    }
  if (action == "save") {
    out.action = SlotAction::kSave;
  } else if (action == "restore") {
    out.action = SlotAction::kRestore;
  } else if (action == "erase") {
    out.action = SlotAction::kErase;
    return std::nullopt;
  } else {
    return bad(
        "action '" + std::string(action) + "' is not a slot action (save, restore, erase: /slots/ID?action=save)",
        "action");
  }
  json o;
  if (auto e = parse_body_object(body, lim, "{\"filename\": NAME}", o)) return e;
  if (!o.contains("filename") || !o["filename"].is_string()) return bad("'filename' must be a string", "filename");
  out.filename = o["filename"].get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> parse_tokenize(std::string_view body, const Limits& lim, TokenizeRequest& out) {
  out = TokenizeRequest{};
  json o;
  if (auto e = parse_body_object(body, lim, "{\"content\": string}", o)) return e;
  auto it = o.find("content");
  if (it == o.end() || !it->is_string()) return bad("'content' must be a string", "content");
  out.content = it->get<std::string>();
  if (auto e = get_bool(o, "add_special", out.add_special)) return e;
  if (auto e = get_bool(o, "with_pieces", out.with_pieces)) return e;
  return std::nullopt;
}

std::optional<ApiError> parse_detokenize(std::string_view body, const Limits& lim, std::vector<int64_t>& out) {
  out.clear();
  json o;
  if (auto e = parse_body_object(body, lim, "{\"tokens\": [ids]}", o)) return e;
  auto it = o.find("tokens");
  if (it == o.end() || !it->is_array()) return bad("'tokens' must be an array of token ids", "tokens");
  for (const auto& v : *it) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX))
      return bad("'tokens' must hold integers", "tokens");
    out.push_back(v.get<int64_t>());
  }
  return std::nullopt;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0)
      need = 2;
    else if ((c & 0xF0) == 0xE0)
      need = 3;
    else if ((c & 0xF8) == 0xF0)
      need = 4;
    return need > back ? n - back : n;
  }
  return n;
}

std::string finish_reason(const std::string& stop_reason) {
  return (stop_reason == "length" || stop_reason == "context") ? "length" : "stop";
}

namespace {
// Label values escape backslash, double quote and newline; comments backslash and newline (format 0.0.4).
std::string prom_escape(const std::string& v, bool quote) {
  std::string o;
  for (char c : v) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '\n')
      o += "\\n";
    else if (c == '"' && quote)
      o += "\\\"";
    else
      o += c;
  }
  return o;
}

void prom_metric(std::string& out, const char* name, const char* type, const char* help,
                 const std::vector<std::pair<std::string, double>>& samples) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  for (const auto& [labels, v] : samples) {
    char num[64];
    std::snprintf(num, sizeof num, "%.17g", v);
    out += std::string(name) + labels + " " + num + "\n";
  }
}
}  // namespace

std::string prometheus_metrics(const MetricsSnapshot& m) {
  std::string o;
  auto one = [](double v) { return std::vector<std::pair<std::string, double>>{{"", v}}; };
  prom_metric(o, "anelab_uptime_seconds", "gauge", "Seconds since the server started.", one(m.uptime_s));
  prom_metric(o, "anelab_workers", "gauge", "Generation workers.", one(double(m.workers)));
  prom_metric(o, "anelab_queue_max", "gauge", "Requests that may wait beyond the running ones.",
              one(double(m.queue_max)));
  prom_metric(o, "anelab_requests_running", "gauge", "Requests being generated now.", one(double(m.running)));
  prom_metric(o, "anelab_requests_waiting", "gauge", "Requests queued now.", one(double(m.waiting)));
  if (!m.slot_busy.empty()) {
    std::vector<std::pair<std::string, double>> slots;
    for (size_t i = 0; i < m.slot_busy.size(); ++i)
      slots.emplace_back("{slot=\"" + std::to_string(i) + "\"}", double(m.slot_busy[i]));
    prom_metric(o, "anelab_slot_busy", "gauge", "Per worker (llama.cpp's slot): 1 while it generates.", slots);
  }
  if (const BatchFigures& b = m.batch; b.batched) {
    prom_metric(o, "anelab_batch_steps_total", "counter", "Batched decode steps (continuous batching).",
                one(double(b.steps)));
    prom_metric(o, "anelab_batch_decode_tokens_total", "counter",
                "Tokens decoded by the batched steps (divided by the steps: tokens per step).",
                one(double(b.decode_tokens)));
    prom_metric(o, "anelab_batch_tokens_per_step", "gauge", "Tokens (slots) of the latest batched decode step.",
                one(double(b.last_batch)));
    std::vector<std::pair<std::string, double>> sizes;
    for (size_t i = 1; i < b.batch_sizes.size(); ++i)
      sizes.emplace_back("{size=\"" + std::to_string(i) + "\"}", double(b.batch_sizes[i]));
    prom_metric(o, "anelab_batch_steps_by_size_total", "counter", "Batched decode steps by their number of tokens.",
                sizes);
    prom_metric(o, "anelab_batch_prefill_tokens_total", "counter", "Prompt tokens prefilled in chunks between steps.",
                one(double(b.prefill_tokens)));
    std::vector<std::pair<std::string, double>> states;
    for (size_t i = 0; i < b.slots.size(); ++i)
      for (const char* st : {"idle", "prefill", "decode", "sampling"})
        states.emplace_back("{slot=\"" + std::to_string(i) + "\",state=\"" + st + "\"}",
                            b.slots[i].state == st ? 1.0 : 0.0);
    prom_metric(o, "anelab_slot_state", "gauge", "Per slot: 1 for its state (continuous batching).", states);
  }
  prom_metric(o, "anelab_requests_total", "counter", "Generation requests by outcome.",
              {{"{outcome=\"admitted\"}", double(m.admitted)},
               {"{outcome=\"rejected\"}", double(m.rejected)},
               {"{outcome=\"completed\"}", double(m.completed)},
               {"{outcome=\"cancelled\"}", double(m.cancelled)},
               {"{outcome=\"failed\"}", double(m.failed)}});
  prom_metric(o, "anelab_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
              one(double(m.prompt_tokens)));
  prom_metric(o, "anelab_completion_tokens_total", "counter", "Generated tokens of finished requests.",
              one(double(m.completion_tokens)));
  prom_metric(o, "anelab_prompt_tokens_cached_total", "counter",
              "Prompt tokens of finished requests taken from the prompt cache (not prefilled again).",
              one(double(m.cached_tokens)));
  if (const PromptCacheFigures& c = m.prompt_cache; c.enabled) {
    prom_metric(o, "anelab_prompt_store_capacity_bytes", "gauge", "The prompt store's bound (--cache-ram).",
                one(double(c.capacity_bytes)));
    prom_metric(o, "anelab_prompt_store_bytes", "gauge",
                "Bytes held by the prompt store (K/V rows, recurrent states, tokens and LoRA scales of its entries).",
                one(double(c.bytes)));
    prom_metric(o, "anelab_prompt_store_entries", "gauge", "Sequences held by the prompt store.",
                one(double(c.entries)));
    prom_metric(o, "anelab_prompt_store_hits_total", "counter",
                "Requests whose cached prefix came from the prompt store.", one(double(c.hits)));
    prom_metric(o, "anelab_prompt_store_hit_tokens_total", "counter",
                "Prompt tokens taken from the prompt store (not prefilled again).", one(double(c.hit_tokens)));
    prom_metric(o, "anelab_prompt_store_stored_total", "counter",
                "Sequences moved into the prompt store from a slot taken for another prompt.", one(double(c.stored)));
    prom_metric(o, "anelab_prompt_store_evicted_total", "counter",
                "Sequences dropped from the prompt store, least recently used first, to stay within its bound.",
                one(double(c.evicted)));
  }
  prom_metric(o, "anelab_draft_tokens_total", "counter", "Tokens drafted by prompt lookup (--draft-max).",
              one(double(m.drafted)));
  prom_metric(o, "anelab_draft_tokens_accepted_total", "counter",
              "Drafted tokens that equalled what was sampled (acceptance = accepted / drafted).",
              one(double(m.accepted)));
  prom_metric(o, "anelab_power_available", "gauge",
              "1 when the server measures energy (see anelab_energy_joules_total).",
              one(m.power_available ? 1.0 : 0.0));
  if (!m.power_available) {
    o += "# power not available: " + prom_escape(m.power_reason, false) + "\n";
    return o;
  }
  std::vector<std::pair<std::string, double>> rails;
  for (const auto& [rail, j] : m.energy_j)
    rails.push_back(
        {"{rail=\"" + prom_escape(rail, true) + "\",source=\"" + prom_escape(m.power_source, true) + "\"}", j});
  prom_metric(o, "anelab_energy_joules_total", "counter",
              "Energy per rail since the server started (cpu includes core; whole machine, not only this server).",
              rails);
  return o;
}

}  // namespace anelab::serve
