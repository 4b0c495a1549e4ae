#include "models/tokenizer/chat_template.h"

#include "framework/core/error.h"

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

}  // namespace anelab::tok
