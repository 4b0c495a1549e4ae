#include "models/tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::tok {
namespace {

[[noreturn]] void bad_role(size_t i, const std::string& role, const char* expected) {
  fail("chat", "message ", i, " has unknown role '", role, "' (expected ", expected, ")");
}

// Jinja's trim / Python's str.strip(chars): the characters in `chars` removed from either end.
std::string strip(const std::string& s, const char* chars = " \t\n\r\f\v", bool left = true, bool right = true) {
  const size_t b = left ? s.find_first_not_of(chars) : 0;
  if (b == std::string::npos) return "";
  const size_t e = right ? s.find_last_not_of(chars) : s.size() - 1;
  return s.substr(b, e - b + 1);
}

// ChatML tool messages: consecutive ones are grouped into one user turn of <tool_response> blocks.
void chatml_tool(const std::vector<ChatMessage>& m, size_t i, std::string& out) {
  if (i == 0 || m[i - 1].role != "tool") out += "<|im_start|>user";
  out += "\n<tool_response>\n" + m[i].content + "\n</tool_response>";
  if (i + 1 == m.size() || m[i + 1].role != "tool") out += "<|im_end|>\n";
}

const char* kToolsHead =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>";
const char* kToolsTail =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

std::string tools_block(const std::vector<std::string>& tools) {
  std::string out = kToolsHead;
  for (const auto& t : tools) out += "\n" + t;
  return out + kToolsTail;
}

// Llama 3.1's words before the tools (its Jinja; "value}." and "Do not" are written without a space between).
const char* kLlama3ToolsHead =
    "Given the following functions, please respond with a JSON for a function call with its proper arguments that "
    "best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
    "argument name and its value}.Do not use variables.\n\n";
const char* kGemma3ToolsHead =
    "You have access to the following functions. To call one, respond with nothing but a JSON object in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.\n\n";

std::string tool_call_text(const ToolCall& c) {
  return "<tool_call>\n{\"name\": \"" + c.name + "\", \"arguments\": " + c.arguments + "}\n</tool_call>";
}

// Qwen3: the index of the last user message that is not a wrapped tool response (else the last index).
size_t qwen3_last_query(const std::vector<ChatMessage>& m) {
  for (size_t k = m.size(); k-- > 0;) {
    const std::string& c = m[k].content;
    const bool wrapped = c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
    if (m[k].role == "user" && !wrapped) return k;
  }
  return m.empty() ? 0 : m.size() - 1;
}

// Qwen3's assistant turn: the reasoning before "</think>" is split off the answer and kept only after the
// last user query.
std::string qwen3_assistant(const std::vector<ChatMessage>& m, size_t i, size_t last_query) {
  std::string content = m[i].content, reasoning;
  if (const size_t close = content.find("</think>"); close != std::string::npos) {
    const std::string before = strip(content.substr(0, close), "\n", false, true);
    const size_t open = before.rfind("<think>");
    reasoning = strip(open == std::string::npos ? before : before.substr(open + 7), "\n", true, false);
    content = strip(content.substr(content.rfind("</think>") + 8), "\n", true, false);
  }
  std::string out = "<|im_start|>assistant\n";
  if (i > last_query && (i + 1 == m.size() || !reasoning.empty()))
    out += "<think>\n" + strip(reasoning, "\n") + "\n</think>\n\n" + strip(content, "\n", true, false);
  else
    out += content;
  for (size_t k = 0; k < m[i].tool_calls.size(); ++k) {
    if (k > 0 || !content.empty()) out += "\n";
    out += tool_call_text(m[i].tool_calls[k]);
  }
  return out + "<|im_end|>\n";
}

std::string qwen3(const std::vector<ChatMessage>& m, bool add_generation_prompt, bool enable_thinking,
                  const std::vector<std::string>& tools) {
  std::string out;
  if (!tools.empty())
    out += "<|im_start|>system\n" + (!m.empty() && m[0].role == "system" ? m[0].content + "\n\n" : "") +
           tools_block(tools);
  else if (!m.empty() && m[0].role == "system")
    out += "<|im_start|>system\n" + m[0].content + "<|im_end|>\n";
  const size_t last_query = qwen3_last_query(m);
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& role = m[i].role;
    if (role == "user" || (role == "system" && i > 0))
      out += "<|im_start|>" + role + "\n" + m[i].content + "<|im_end|>\n";
    else if (role == "assistant")
      out += qwen3_assistant(m, i, last_query);
    else if (role == "tool")
      chatml_tool(m, i, out);
    else if (role != "system")
      bad_role(i, role, "system, user, assistant or tool");
  }
  if (add_generation_prompt)
    out += enable_thinking ? "<|im_start|>assistant\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return out;
}

// Qwen3.5 (its chat_template, llama.cpp models/templates/Qwen3.5-4B.jinja): every content trimmed; an assistant
// message's reasoning split off at "</think>" always, and written back in a "<think>" block (empty or not) only
// after the last user query; the generation prompt opens the reasoning ("<think>\n") or closes an empty one.
std::string qwen35(const std::vector<ChatMessage>& m, bool add_generation_prompt, bool enable_thinking) {
  if (m.empty()) fail("chat", "the qwen3.5 template needs at least one message");
  std::string out;
  if (m[0].role == "system") out += "<|im_start|>system\n" + strip(m[0].content) + "<|im_end|>\n";
  size_t last_query = m.size();
  for (size_t k = m.size(); k-- > 0 && last_query == m.size();) {
    const std::string c = strip(m[k].content);
    if (m[k].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) last_query = k;
  }
  if (last_query == m.size()) fail("chat", "the qwen3.5 template needs a user message (none found)");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& role = m[i].role;
    std::string content = strip(m[i].content);
    if (role == "system") {
      if (i > 0) fail("chat", "message ", i, ": the qwen3.5 template takes a system message only first");
    } else if (role == "user") {
      out += "<|im_start|>user\n" + content + "<|im_end|>\n";
    } else if (role == "assistant") {
      std::string reasoning;
      if (const size_t close = content.find("</think>"); close != std::string::npos) {
        const std::string before = strip(content.substr(0, close), "\n", false, true);
        const size_t open = before.rfind("<think>");
        reasoning = strip(open == std::string::npos ? before : before.substr(open + 7), "\n", true, false);
        content = strip(content.substr(content.rfind("</think>") + 8), "\n", true, false);
      }
      out += "<|im_start|>assistant\n";
      if (i > last_query) out += "<think>\n" + strip(reasoning) + "\n</think>\n\n";
      out += content + "<|im_end|>\n";
    } else if (role == "tool") {
      chatml_tool(m, i, out);
    } else {
      bad_role(i, role, "system, user, assistant or tool");
    }
  }
  if (add_generation_prompt)
    out += enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  return out;
}

// A tool definition as Jinja's `tojson(indent=4)` prints it (Python's json.dumps with indent=4: ", " becomes ","
// and a newline, keys in their order).
std::string tojson_indent4(const std::string& tool) {
  const auto j = nlohmann::ordered_json::parse(tool, nullptr, false);
  if (j.is_discarded()) fail("chat", "a tool definition is not JSON: ", tool.substr(0, 100));
  return j.dump(4, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// The JSON call both Llama 3.1's template and the Gemma 3 form below write: {"name": "N", "parameters": A}.
std::string json_call_text(const ToolCall& c) {
  return "{\"name\": \"" + c.name + "\", \"parameters\": " + c.arguments + "}";
}

const ToolCall& single_call(const ChatMessage& msg, size_t i, const char* family) {
  if (msg.tool_calls.size() != 1)
    fail("chat", "message ", i, ": the ", family, " template takes one tool call per assistant message (got ",
         msg.tool_calls.size(), ")");
  return msg.tool_calls[0];
}

// Llama 3; with tools, Llama 3.1's "tools in the first user message" form (Meta-Llama-3.1-8B-Instruct's
// tokenizer_config.json): that message starts with the instructions and each tool as tojson(indent=4), an
// assistant's call is the JSON {"name": N, "parameters": A}, a tool's answer an "ipython" turn. The 3.1
// template's system preamble ("Environment: ipython", the knowledge dates) is not written: Llama 3's has none.
std::string llama3(const std::vector<ChatMessage>& m, bool add_generation_prompt,
                   const std::vector<std::string>& tools) {
  std::string out;
  bool tools_said = tools.empty();
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& role = m[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_role(i, role, "system, user, assistant or tool");
    if (i == 0) out += "<|begin_of_text|>";
    if (role == "tool") {
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + m[i].content + "<|eot_id|>";
    } else if (role == "assistant" && !m[i].tool_calls.empty()) {
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n" + json_call_text(single_call(m[i], i, "llama3")) +
             "<|eot_id|>";
    } else if (role == "user" && !tools_said) {
      out += "<|start_header_id|>user<|end_header_id|>\n\n" + std::string(kLlama3ToolsHead);
      for (const auto& t : tools) out += tojson_indent4(t) + "\n\n";
      out += strip(m[i].content) + "<|eot_id|>";
      tools_said = true;
    } else {
      out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + strip(m[i].content) + "<|eot_id|>";
    }
  }
  if (!tools_said) fail("chat", "the llama3 template puts the tools in the first user message: there is none");
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Gemma 3; with tools (its template has none: the form of Google's Gemma function-calling guide), the first user
// turn starts with the instructions and one tojson line per tool, an assistant's call is the JSON {"name": N,
// "parameters": A}, and a tool's answer is a user turn (so that the roles still alternate).
std::string gemma3(const std::vector<ChatMessage>& m, bool add_generation_prompt,
                   const std::vector<std::string>& tools) {
  std::string out = "<bos>", prefix;
  size_t first = 0;
  if (!m.empty() && m[0].role == "system") prefix = m[0].content + "\n\n", first = 1;
  if (!tools.empty()) {
    std::string t = kGemma3ToolsHead;
    for (const auto& x : tools) t += x + "\n";
    prefix = t + "\n" + prefix;
  }
  for (size_t i = first; i < m.size(); ++i) {
    const std::string& role = m[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_role(i, role, "system, user, assistant or tool");
    const bool user_side = role == "user" || role == "tool";
    if (user_side != ((i - first) % 2 == 0))
      fail("chat", "message ", i, " (", role, "): Gemma 3's conversation roles must alternate user/assistant/user/...");
    const std::string content = role == "assistant" && !m[i].tool_calls.empty()
                                    ? json_call_text(single_call(m[i], i, "gemma3"))
                                    : strip(m[i].content);
    out += "<start_of_turn>" +
           (user_side             ? std::string("user")
            : role == "assistant" ? std::string("model")
                                  : role) +
           "\n" + (i == first ? prefix : "") + content + "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

struct Family {
  ChatTemplate t;
  const char* name;
  std::vector<const char*> tokens;  // control tokens the vocabulary must define
};
// In the order "auto" tries them (Qwen3 before Qwen2.5: its vocabulary is Qwen2.5's plus <think>).
const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {ChatTemplate::kLlama3,
       "llama3",
       {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|begin_of_text|>"}},
      {ChatTemplate::kGemma3, "gemma3", {"<start_of_turn>", "<end_of_turn>", "<bos>"}},
      {ChatTemplate::kQwen3, "qwen3", {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}},
      {ChatTemplate::kQwen35, "qwen3.5", {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}},
      {ChatTemplate::kQwen25, "qwen2.5", {"<|im_start|>", "<|im_end|>"}}};
  return f;
}

bool has_tokens(const Tokenizer& tk, const Family& f) {
  for (const char* t : f.tokens)
    if (tk.token_to_id(t) < 0) return false;
  return true;
}

}  // namespace

const char* chat_template_name(ChatTemplate t) {
  for (const Family& f : families())
    if (f.t == t) return f.name;
  return "none";
}

std::string apply_qwen25_chat_template(const std::vector<ChatMessage>& m, bool add_generation_prompt,
                                       const std::vector<std::string>& tools) {
  std::string out = "<|im_start|>system\n";
  out += !m.empty() && m[0].role == "system" ? m[0].content : std::string(kQwen25DefaultSystem);
  out += tools.empty() ? std::string("<|im_end|>\n") : "\n\n" + tools_block(tools);
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& role = m[i].role;
    if (role == "assistant" && !m[i].tool_calls.empty()) {
      out += "<|im_start|>assistant";
      if (!m[i].content.empty()) out += "\n" + m[i].content;
      for (const auto& c : m[i].tool_calls) out += "\n" + tool_call_text(c);
      out += "<|im_end|>\n";
    } else if (role == "user" || (role == "system" && i > 0) || role == "assistant") {
      out += "<|im_start|>" + role + "\n" + m[i].content + "<|im_end|>\n";
    } else if (role == "tool") {
      chatml_tool(m, i, out);
    } else if (!(role == "system" && i == 0)) {
      bad_role(i, role, "system, user, assistant or tool");
    }
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& m, bool add_generation_prompt,
                                bool enable_thinking, const std::vector<std::string>& tools) {
  bool calls = false;
  for (const auto& x : m) calls = calls || !x.tool_calls.empty();
  if ((!tools.empty() || calls) && t == ChatTemplate::kQwen35)
    fail("chat", "the ", chat_template_name(t),
         " template has no tool calling (tools work with qwen2.5, qwen3, llama3 and gemma3)");
  switch (t) {
    case ChatTemplate::kQwen25:
      return apply_qwen25_chat_template(m, add_generation_prompt, tools);
    case ChatTemplate::kQwen3:
      return qwen3(m, add_generation_prompt, enable_thinking, tools);
    case ChatTemplate::kQwen35:
      return qwen35(m, add_generation_prompt, enable_thinking);
    case ChatTemplate::kLlama3:
      return llama3(m, add_generation_prompt, tools);
    case ChatTemplate::kGemma3:
      return gemma3(m, add_generation_prompt, tools);
    case ChatTemplate::kNone:
      break;
  }
  fail("chat", "the model has no chat template");
}

ChatTemplate chat_template_for(const Tokenizer& tk, const std::string& requested, std::string_view arch) {
  if (requested == "none") return ChatTemplate::kNone;
  if (requested == "auto") {
    // Qwen3.5's control tokens are Qwen3's: the architecture tells the two apart.
    const ChatTemplate skip = arch == "qwen35" ? ChatTemplate::kQwen3 : ChatTemplate::kQwen35;
    for (const Family& f : families())
      if (f.t != skip && has_tokens(tk, f)) return f.t;
    return ChatTemplate::kNone;
  }
  const std::string name = requested == "chatml" ? "qwen2.5" : requested;
  for (const Family& f : families()) {
    if (name != f.name) continue;
    if (!has_tokens(tk, f)) {
      std::string list;
      for (const char* t : f.tokens) list += (list.empty() ? "" : " ") + std::string(t);
      fail("chat", "--chat-template ", requested, ": the vocabulary (", tk.describe(), ") lacks some of ", list,
           ", so the model cannot follow that template");
    }
    return f.t;
  }
  fail("chat", "unknown --chat-template '", requested,
       "' (auto, qwen2.5, chatml, qwen3, qwen3.5, llama3, gemma3, none)");
}

std::vector<int32_t> chat_stop_ids(ChatTemplate t, const Tokenizer& tk) {
  const char* stop = t == ChatTemplate::kLlama3   ? "<|eot_id|>"
                     : t == ChatTemplate::kGemma3 ? "<end_of_turn>"
                                                  : "<|im_end|>";
  const int32_t id = t == ChatTemplate::kNone ? -1 : tk.token_to_id(stop);
  return id >= 0 ? std::vector<int32_t>{id} : std::vector<int32_t>{};
}

ToolCallForm tool_call_form(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama3:
    case ChatTemplate::kGemma3:
      return ToolCallForm::kJson;
    case ChatTemplate::kNone:
    case ChatTemplate::kQwen25:
    case ChatTemplate::kQwen3:
    case ChatTemplate::kQwen35:
      break;
  }
  return ToolCallForm::kTagged;
}

std::string no_chat_template_hint(const std::string& model) {
  return model +
         " has no chat template (a base model: its vocabulary has no chat control tokens such as "
         "<|im_start|>); use `anelab infer generate --prompt TEXT` (or /v1/completions) for plain "
         "continuation, or a chat model such as Qwen2.5-Instruct";
}

}  // namespace anelab::tok
