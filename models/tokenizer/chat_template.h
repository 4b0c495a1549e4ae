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
//
// Which template a model gets (chat_template_for): a template only when the model has one. "auto" means the
// model's own: the Qwen2.5 template when its vocabulary defines the template's control tokens <|im_start|>
// and <|im_end|> (as Qwen2.5's tokenizer config does); base models (llama2.c stories, GPT-2) have none, and
// chat refuses them with a hint. "qwen2.5" (alias "chatml") names the family explicitly (its control tokens
// must still be in the vocabulary); "none" turns chat off.
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

class Tokenizer;
enum class ChatTemplate { kNone, kQwen25 };
// The template for a model with tokenizer `tk`, given --chat-template `requested` (auto | qwen2.5 | chatml |
// none). Throws "[chat] unknown --chat-template X (auto, qwen2.5, chatml, none)" or, for a named family whose
// control tokens the vocabulary lacks, "[chat] --chat-template qwen2.5: the vocabulary has no <|im_start|>".
ChatTemplate chat_template_for(const Tokenizer& tk, const std::string& requested);
// The one-line refusal for a model without a template ("<model> has no chat template: ...; use ...").
std::string no_chat_template_hint(const std::string& model);

}  // namespace anelab::tok
