#include "models/tokenizer/chat_template.h"

#include "framework/core/error.h"
#include "models/tokenizer/tokenizer.h"

namespace anelab::tok {

std::string apply_qwen25_chat_template(const std::vector<ChatMessage>& m, bool add_generation_prompt) {
  std::string out = "<|im_start|>system\n";
  out += !m.empty() && m[0].role == "system" ? m[0].content : std::string(kQwen25DefaultSystem);
  out += "<|im_end|>\n";
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& role = m[i].role;
    if (role == "user" || (role == "system" && i > 0) || role == "assistant") {
      out += "<|im_start|>" + role + "\n" + m[i].content + "<|im_end|>\n";
    } else if (role == "tool") {
      if (i == 0 || m[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m[i].content + "\n</tool_response>";
      if (i + 1 == m.size() || m[i + 1].role != "tool") out += "<|im_end|>\n";
    } else if (!(role == "system" && i == 0)) {
      fail("chat", "message ", i, " has unknown role '", role, "' (expected system, user, assistant or tool)");
    }
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

ChatTemplate chat_template_for(const Tokenizer& tk, const std::string& requested) {
  const bool chatml_tokens = tk.token_to_id("<|im_start|>") >= 0 && tk.token_to_id("<|im_end|>") >= 0;
  if (requested == "auto") return chatml_tokens ? ChatTemplate::kQwen25 : ChatTemplate::kNone;
  if (requested == "none") return ChatTemplate::kNone;
  if (requested == "qwen2.5" || requested == "chatml") {
    if (!chatml_tokens)
      fail("chat", "--chat-template ", requested, ": the vocabulary (", tk.describe(),
           ") has no <|im_start|>/<|im_end|> tokens, so the model cannot follow that template");
    return ChatTemplate::kQwen25;
  }
  fail("chat", "unknown --chat-template '", requested, "' (auto, qwen2.5, chatml, none)");
}

std::string no_chat_template_hint(const std::string& model) {
  return model + " has no chat template (a base model: its vocabulary has no chat control tokens such as "
                 "<|im_start|>); use `anelab infer generate --prompt TEXT` (or /v1/completions) for plain "
                 "continuation, or a chat model such as Qwen2.5-Instruct";
}

}  // namespace anelab::tok
