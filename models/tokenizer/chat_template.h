// Qwen2.5-Instruct chat template (qwen2.5_chat_template.jinja, llama.cpp models/templates) in C++, for
// conversations without tool definitions:
//   <|im_start|>system\n{system}<|im_end|>\n          (first message if role "system", else the default
//                                                     "You are Qwen, created by Alibaba Cloud. You are a
//                                                     helpful assistant.")
//   <|im_start|>{role}\n{content}<|im_end|>\n         for user / assistant / later system messages
//   tool messages: consecutive ones are grouped into one
//   <|im_start|>user\n<tool_response>\n{c1}\n</tool_response>\n<tool_response>\n{c2}\n</tool_response><|im_end|>\n
//   <|im_start|>assistant\n                           when add_generation_prompt
// An empty conversation yields the default system block (the jinja would fail). Unknown roles throw
// (the jinja silently drops them). Tool definitions and assistant tool_calls are not supported.
// Encode the result with EncodeOptions::allow_special = true.
#pragma once
#include <string>
#include <vector>

namespace anelab::tok {

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant" | "tool"
  std::string content;
};

inline constexpr const char* kQwen25DefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

std::string apply_qwen25_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace anelab::tok
