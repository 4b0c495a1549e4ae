// Chat templates in C++ (the Jinja text of each family's tokenizer config, for conversations without tool
// definitions). Encode the result with EncodeOptions::allow_special = true (and no add_bos: the templates that
// need a BOS write it).
//
// Qwen2.5 (qwen2.5_chat_template.jinja, llama.cpp models/templates), "qwen2.5" / "chatml":
//   <|im_start|>system\n{system}<|im_end|>\n          (first message if role "system", else the default
//                                                     "You are Qwen, created by Alibaba Cloud. You are a
//                                                     helpful assistant.")
//   <|im_start|>{role}\n{content}<|im_end|>\n         for user / assistant / later system messages
//   tool messages: consecutive ones are grouped into one
//   <|im_start|>user\n<tool_response>\n{c1}\n</tool_response>\n<tool_response>\n{c2}\n</tool_response><|im_end|>\n
//   <|im_start|>assistant\n                           when add_generation_prompt
// Qwen3 (Qwen3's tokenizer_config.json), "qwen3": ChatML as above without a default system message; an
// assistant message's "<think>...</think>" reasoning is dropped before the last user query, and after it kept
// as "<think>\n{reasoning}\n</think>\n\n{answer}" (always for the last message); the generation prompt is
// "<|im_start|>assistant\n" with thinking on (the template's default), and with enable_thinking false (the
// template's variable: infer chat --no-think, the server's request field) "<|im_start|>assistant\n<think>\n\n
// </think>\n\n", an empty reasoning block the model continues after. The other templates ignore it, as their
// Jinja does.
// Qwen3.5 (Qwen3.5's chat_template; llama.cpp models/templates/Qwen3.5-4B.jinja), "qwen3.5": ChatML, every
// content trimmed, a system message only first (else it throws, as the Jinja does), at least one user message; an
// assistant message's reasoning (before "</think>") is always split off its answer, and written back as
// "<think>\n{reasoning}\n</think>\n\n{answer}" only after the last user query (an empty block included); the
// generation prompt is "<|im_start|>assistant\n<think>\n" with thinking on (the model writes its reasoning first)
// and "<|im_start|>assistant\n<think>\n\n</think>\n\n" with enable_thinking false. No tool definitions yet (its
// calls are XML <function=...> blocks, not Qwen3's JSON): tools throw.
// Llama 3 (Meta-Llama-3-Instruct), "llama3":
//   <|begin_of_text|> then per message <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>
//   <|start_header_id|>assistant<|end_header_id|>\n\n  when add_generation_prompt
//   (Llama 3.1/3.2's templates also add a system block with "Cutting Knowledge Date": not done; their tools are,
//   below.)
// Gemma 3 (gemma-3-*-it), "gemma3": <bos>, roles user / model alternating (assistant is written "model"):
//   <start_of_turn>{role}\n{content, trimmed}<end_of_turn>\n; a first system message becomes "{system}\n\n"
//   at the start of the first user turn; <start_of_turn>model\n when add_generation_prompt.
// An empty conversation yields the template's preamble only. Unknown roles throw (the Jinja silently drops
// them); Gemma 3 throws as its Jinja does when the roles do not alternate.
// Tools, Qwen2.5 and Qwen3: the system turn gains "# Tools" with one `tojson` line per tool inside
// <tools></tools> and the <tool_call> instructions (Qwen2.5: after the system message or its default; Qwen3: after
// "{system}\n\n" when there is one); an assistant message's tool_calls follow its content as
// "\n<tool_call>\n{"name": "N", "arguments": A}\n</tool_call>" (Qwen3: the first without "\n" when the content is
// empty). The model answers a call in the same form (parsed by the server, infer/server/api.h).
// Tools, Llama 3 (Llama 3.1's JSON tool calling, tools in the first user message) and Gemma 3 (no tools in its
// template: the form of Google's Gemma function-calling guide): the first user turn starts with instructions and the
// tools; a call is a bare JSON object {"name": "N", "parameters": A}, one per assistant message; a tool's answer is
// Llama's "ipython" turn, Gemma's user turn. Qwen3.5 refuses tools.
//
// Which template a model gets (chat_template_for): a template only when the model has one. "auto" means the
// model's own, decided by the control tokens its vocabulary defines: <|start_header_id|>/<|end_header_id|>/
// <|eot_id|> -> llama3; <start_of_turn>/<end_of_turn> -> gemma3; <|im_start|>/<|im_end|> with <think>/</think>
// -> qwen3 (qwen3.5 for a qwen35 model: the same tokens), without -> qwen2.5. Base models (llama2.c stories, GPT-2)
// have none, and chat refuses them with a hint. A family named explicitly must still find its control tokens in the
// vocabulary; "none" turns chat off.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anelab::tok {

// An assistant message's call of a tool: the function's name and its arguments as JSON text (Python json.dumps
// form, as the templates' tojson prints it).
struct ToolCall {
  std::string name, arguments;
};

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant" | "tool"
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant messages only
};

inline constexpr const char* kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

enum class ChatTemplate { kNone, kQwen25, kQwen3, kQwen35, kLlama3, kGemma3 };
const char* chat_template_name(ChatTemplate t);  // "none", "qwen2.5", "qwen3", "qwen3.5", "llama3", "gemma3"

// tools: the tool definitions, each as its templates' `tool | tojson` text (non-empty: the Qwen templates' "# Tools"
// system block, Llama 3's and Gemma 3's first-user-turn instructions; qwen3.5 throws "[chat] the qwen3.5 template
// has no tool calling").
std::string apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                bool enable_thinking = true, const std::vector<std::string>& tools = {});
std::string apply_qwen25_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                       const std::vector<std::string>& tools = {});

// How a template's model writes a tool call: kTagged "<tool_call>\n{"name": N, "arguments": A}\n</tool_call>" blocks
// (Qwen), kJson an answer that is one {"name": N, "parameters": A} object (Llama 3.1, Gemma 3).
enum class ToolCallForm { kTagged, kJson };
ToolCallForm tool_call_form(ChatTemplate t);

class Tokenizer;
// The template for a model of architecture `arch` with tokenizer `tk`, given --chat-template `requested` (auto |
// qwen2.5 | chatml | qwen3 | qwen3.5 | llama3 | gemma3 | none). Throws "[chat] unknown --chat-template X (...)" or, for
// a named family whose control tokens the vocabulary lacks, "[chat] --chat-template llama3: the vocabulary ... has no
// ...".
ChatTemplate chat_template_for(const Tokenizer& tk, const std::string& requested, std::string_view arch = "");
// The ids that end an assistant turn (<|im_end|>, <|eot_id|>, <end_of_turn>) in tk's vocabulary.
std::vector<int32_t> chat_stop_ids(ChatTemplate t, const Tokenizer& tk);
// The one-line refusal for a model without a template ("<model> has no chat template: ...; use ...").
std::string no_chat_template_hint(const std::string& model);

}  // namespace anelab::tok
