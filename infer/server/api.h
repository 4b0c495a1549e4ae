// The HTTP API of `anelab serve` as pure functions (no sockets, no model): request parsing and
// validation, response / stream-chunk / error JSON. See docs/server.md for the wire format.
//
// Requests (JSON object bodies):
//   POST /v1/completions       prompt (string | [string] | [token ids]), system (extension: wraps the
//                              prompt in the chat template, like the seeds' simple form), echo
//   POST /v1/chat/completions  messages [{role, content (string | [{type:"text", text}]), name?}]
//   both: model, max_tokens (max_completion_tokens on chat), temperature, top_p, top_k, min_p,
//         repeat_penalty, seed, stop (string | [string], at most 4), stream, stream_options.include_usage,
//         n (must be 1), user (ignored), ...; see kIgnoredFields / check_unsupported in api.cpp.
//         Structured output (at most one of): response_format {"type": "text" | "json_object" | "json_schema",
//         "json_schema": {"name", "schema", "strict"}} (OpenAI), json_schema (a schema, llama.cpp), grammar (GBNF
//         text, llama.cpp); compiled here (models/grammar/), a bad schema or grammar is a 400 naming it.
// Unknown fields are rejected (400, param = the field), like OpenAI's "Unrecognized request argument".
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/chat_template.h"

namespace anelab::grammar {
class Grammar;
}

namespace anelab::serve {

// kLlama: llama.cpp's native POST /completion (its field names and answer; unknown fields ignored, as there).
enum class Endpoint { kCompletions, kChat, kLlama };

// An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty -> null
  std::string code;   // empty -> null
};

struct Limits {
  int64_t max_tokens_cap = 512;     // max_tokens above this -> 400
  int64_t default_max_tokens = 50;  // when max_tokens is absent (the seeds' default)
  size_t max_stop = 4;              // stop strings
  size_t max_stop_bytes = 256;      // per stop string
  size_t max_messages = 512;
  int max_json_depth = 32;  // nesting deeper than this is rejected before parsing (400)
  // Values and keys of the JSON body, counted before parsing (json_elements); more -> 413. Bounds the parsed
  // document's memory (tens of bytes per element) whatever the body's shape.
  size_t max_json_elements = size_t(1) << 17;
};

// The server's default --max-tokens-cap: a request may ask for at most this many new tokens (or the context,
// when smaller), so that one request cannot hold a worker for a whole large context.
inline constexpr int64_t kDefaultMaxTokensCap = 512;
// The cap in effect: `flag` (0: the whole context) clamped to the context.
int64_t effective_max_tokens_cap(int64_t flag, int64_t context);

// A tool call: the function's name and its arguments as JSON text (in a request: re-printed the way the
// templates' tojson prints it; in an answer: compact, as OpenAI sends it).
struct ToolCallText {
  std::string name, arguments;
};

struct Message {
  std::string role, content;
  std::vector<ToolCallText> tool_calls;  // assistant messages that called tools
};

// One entry of llama.cpp's LoRA lists: the per-request `lora` field and the POST /lora-adapters body,
// [{"id": i, "scale": s}] (i an adapter of GET /lora-adapters; an adapter not listed gets scale 0).
struct LoraScale {
  int64_t id = 0;
  double scale = 0;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                // as sent (any value accepted)
  std::string prompt;               // completions: text prompt
  std::vector<int64_t> prompt_ids;  // completions: token-id prompt (prompt_is_ids)
  bool prompt_is_ids = false;
  std::optional<std::string> system;  // completions extension
  std::vector<Message> messages;      // chat
  bool enable_thinking = true;        // chat: the template's thinking switch (Qwen3; enable_thinking)
  int64_t max_tokens = 50;
  bool max_tokens_set = false;  // explicitly given (else clamped to the context, not rejected)
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repeat_penalty = 1.0;
  int64_t top_k = 0;
  std::optional<uint64_t> seed;  // absent or 0: random
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, echo = false;
  std::shared_ptr<const grammar::Grammar> grammar;         // structured output: the answer must be a sentence of it
  double frequency_penalty = 0.0, presence_penalty = 0.0;  // OpenAI's: minus count * f + (count > 0) * p
  int64_t logprobs = -1;     // >= 0: per-token log-probabilities with this many alternatives (non-streamed answers)
  bool cache_prompt = true;  // reuse the worker's KV cache for the longest common prefix (llama.cpp's field)
  // Chat tools (tool_choice "auto"; "none" clears them): each definition as the templates' tojson prints it.
  std::vector<std::string> tools;
  // llama.cpp's per-request adapters (every endpoint); absent: the server's global scales (POST /lora-adapters).
  std::optional<std::vector<LoraScale>> lora;
  // tool_choice "required" or a named function: {name: parameters schema} of the tools it allows (`grammar` then
  // holds their kTagged forced_tool_grammar; a kJson template's model gets the other, ModelPool::prepare).
  nlohmann::ordered_json forced_tools;
};

// The grammar of a forced call of one of `tools` ({name: parameters schema}) in a template's form: kTagged
// "<tool_call>\n" OBJECT "\n</tool_call>", kJson the object alone; OBJECT is {"name": N, "arguments" (kTagged) |
// "parameters" (kJson): A} with A following N's schema. Throws the converter's error for a schema it refuses.
std::shared_ptr<const grammar::Grammar> forced_tool_grammar(tok::ToolCallForm form,
                                                            const nlohmann::ordered_json& tools);

// Python's json.dumps(ensure_ascii=False) form, the chat templates' `tojson`: ", " and ": " separators, keys in
// the order given.
std::string python_json(const nlohmann::ordered_json& j);

// An answer of a model given tools, split into its text and its calls. kTagged (Qwen): its <tool_call>{"name": N,
// "arguments": {...}}</tool_call> blocks, a block that is not such JSON staying in the text. kJson (Llama 3.1,
// Gemma 3): an answer that is, spaces trimmed, one JSON object {"name": N, "parameters" (or "arguments"): {...}}.
struct ParsedToolCalls {
  std::string content;  // the text outside the blocks, trimmed
  std::vector<ToolCallText> calls;
};
ParsedToolCalls parse_tool_calls(const std::string& text, tok::ToolCallForm form = tok::ToolCallForm::kTagged);
// Where a streamed answer's text must be held back: kTagged the first "<tool_call>", or a tail that may begin one;
// kJson the whole answer while it is spaces or starts with "{" (it may be a call), else nothing.
size_t tool_call_holdback(std::string_view text, tok::ToolCallForm form = tok::ToolCallForm::kTagged);
// The text of an answer before its first call (streamed ahead of the calls).
std::string text_before_calls(const std::string& text, tok::ToolCallForm form);

// Parses and validates a request body. Returns the error when the body is bad (never throws).
std::optional<ApiError> parse_request(Endpoint ep, std::string_view body, const Limits& lim, CompletionRequest& out);

// The deepest [ / { nesting and an upper bound on the values and keys of a JSON text, from one pass without parsing
// it (strings skipped); stops once either passes its cap.
struct JsonStructure {
  int max_depth;
  size_t elements;
};
JsonStructure json_structure(std::string_view text, int depth_cap, size_t element_cap);
// The deepest [ / { nesting of a JSON text (strings skipped); stops counting past `cap`.
int json_depth(std::string_view text, int cap);
// An upper bound on the values and keys of a JSON text, counted without parsing it (1 + commas + colons +
// opening brackets, strings skipped): [1,2,3] -> 4, {"a":1} -> 3; stops counting past `cap`.
size_t json_elements(std::string_view text, size_t cap);

// What a finished generation reports.
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;          // prompt tokens whose KV came from the prompt cache (not prefilled again)
  int64_t drafted = 0, accepted = 0;  // speculative decoding (--draft-max): drafted tokens, and those used
  double queue_ms = 0, prefill_ms = 0, decode_ms = 0, ttft_ms = 0, total_ms = 0;
};

// Identity of one response (shared by all its stream chunks).
struct ResponseMeta {
  std::string id, model;
  int64_t created = 0;
  Endpoint endpoint = Endpoint::kCompletions;
  bool tools = false;  // chat with tools: the answer's calls become tool_calls (finish_reason "tool_calls")
  tok::ToolCallForm tool_form = tok::ToolCallForm::kTagged;  // the model's chat template's form of a call
  bool logprobs = false;                                     // stream chunks carry their tokens' logprob entries
  std::string note;  // "note" in the answer when not empty (a request field adjusted, e.g. max_tokens clamped)
};

// llama.cpp's /completion answer (non-streamed, and the final stream event when `final`): content, stop,
// stop_type ("eos" | "limit" | "word"), tokens_predicted, tokens_evaluated, timings {prompt_n, prompt_ms,
// prompt_per_second, predicted_n, predicted_ms, predicted_per_second, ...}; a stream event is {content, stop:false}.
nlohmann::json llama_completion_json(const ResponseMeta& m, const std::string& text, const std::string& stop_reason,
                                     const Usage& u);
std::string llama_sse_delta(std::string_view text);
std::string llama_sse_final(const ResponseMeta& m, const std::string& stop_reason, const Usage& u);

// A LoRA list (`field` is "lora" in a request, "" for the POST /lora-adapters body): an array of {"id": integer >= 0,
// "scale": finite number}; a bad entry is a 400 naming it (lora[1].scale). Ids are checked against the adapters by
// the generator.
std::optional<ApiError> parse_lora_list(const nlohmann::json& v, const std::string& field, std::vector<LoraScale>& out);
std::optional<ApiError> parse_lora_adapters(std::string_view body, const Limits& lim, std::vector<LoraScale>& out);

// llama.cpp's /tokenize {content, add_special (false), with_pieces (false)} and /detokenize {tokens}.
struct TokenizeRequest {
  std::string content;
  bool add_special = false, with_pieces = false;
};
std::optional<ApiError> parse_tokenize(std::string_view body, const Limits& lim, TokenizeRequest& out);
std::optional<ApiError> parse_detokenize(std::string_view body, const Limits& lim, std::vector<int64_t>& out);

// llama.cpp's POST /slots/{id}?action=save|restore|erase, body {"filename": NAME} (save and restore; erase takes no
// body). A path id that is not a number, an unknown action or a missing filename is a 400 naming it.
enum class SlotAction { kSave, kRestore, kErase };
struct SlotActionRequest {
  size_t slot = 0;
  SlotAction action = SlotAction::kSave;
  std::string filename;
};
std::optional<ApiError> parse_slot_action(std::string_view path, std::string_view target, std::string_view body,
                                          const Limits& lim, SlotActionRequest& out);

// One generated token's log-probability (infer::TokenLogprob with the text of each id).
struct TokenLogprobText {
  std::string piece;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};
// The choice's "logprobs": completions' {tokens, token_logprobs, top_logprobs: [{piece: logprob}], text_offset}
// (text_offset counts bytes of the answer), chat's {content: [{token, logprob, bytes, top_logprobs: [...]}]}.
nlohmann::json logprobs_json(Endpoint ep, const std::vector<TokenLogprobText>& lps);

std::string error_json(const ApiError& e);
// Non-streamed answer: OpenAI fields + the seeds' flat extras (text, prompt_tokens, gen_tokens,
// prefill_tps, decode_tps, ttft_ms, total_ms, ...) + timings.
nlohmann::json completion_json(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                               const Usage& u, const nlohmann::json& logprobs = nullptr);
// One SSE event "data: {...}\n\n": a text delta (finish_reason empty), the role opener (chat), or the
// final chunk (finish_reason set; carries usage and timings).
std::string sse_delta(const ResponseMeta& m, std::string_view text, const nlohmann::json& logprobs = nullptr);
std::string sse_role(const ResponseMeta& m);
std::string sse_final(const ResponseMeta& m, const std::string& finish_reason, const Usage& u, bool usage_chunk);
std::string sse_error(const ApiError& e);
// A chat stream's chunk with the answer's tool calls (delta.tool_calls with index, id, type, function).
std::string sse_tool_calls(const ResponseMeta& m, const std::vector<ToolCallText>& calls);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

nlohmann::json usage_json(const Usage& u);
nlohmann::json timings_json(const Usage& u);
// dump() that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const nlohmann::json& j);

// Length of the longest prefix of s that does not end inside an incomplete UTF-8 sequence (so that
// stream chunks never split a character). Invalid bytes count as complete.
size_t utf8_complete_prefix(std::string_view s);

// GET /metrics: Prometheus text exposition format (version 0.0.4). Counters end in _total; energy is
// per rail of the server's power source (framework/core/power.h) since the server started, and absent
// (with anelab_power_available 0 and the reason as a comment) when there is none: never 0 J.
// Continuous batching (one engine, --parallel slots: infer/batch.h): its steps and each slot's state.
struct BatchFigures {
  bool batched = false;  // false: the workers run engines of their own (a model with a recurrent state)
  uint64_t steps = 0, decode_tokens = 0;  // decode steps, and their rows (decode_tokens / steps: tokens per step)
  uint64_t prefill_tokens = 0, prefill_chunks = 0;
  int64_t last_batch = 0;             // rows of the latest step
  std::vector<uint64_t> batch_sizes;  // [slots + 1]: steps of each batch size
  struct Slot {
    std::string state;  // "idle", "prefill", "decode", "sampling" (between two steps)
    int64_t pos = 0;    // the next position of its sequence
    uint64_t decoded = 0, prefilled = 0;
  };
  std::vector<Slot> slots;
};

// The prompt store (--cache-ram, infer/server/prompt_store.h): its bound and contents, and what it served.
struct PromptCacheFigures {
  bool enabled = false;
  int64_t capacity_bytes = 0, bytes = 0, entries = 0;
  uint64_t hits = 0, hit_tokens = 0, stored = 0, evicted = 0;
};

struct MetricsSnapshot {
  double uptime_s = 0;
  size_t workers = 0, queue_max = 0, running = 0, waiting = 0;
  uint64_t admitted = 0, rejected = 0, completed = 0, cancelled = 0, failed = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  uint64_t cached_tokens = 0;          // prompt tokens served from the prompt cache
  uint64_t drafted = 0, accepted = 0;  // speculative decoding
  std::vector<int> slot_busy;          // per worker: 1 while it generates
  BatchFigures batch;
  PromptCacheFigures prompt_cache;
  bool power_available = false;
  std::string power_source, power_reason;
  std::vector<std::pair<std::string, double>> energy_j;  // (rail, joules) for the rails the source has
};
std::string prometheus_metrics(const MetricsSnapshot& m);
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// Maps a generation stop reason ("eos", "stop_token", "stop_string", "length", "context") to
// OpenAI's finish_reason ("stop" / "length").
std::string finish_reason(const std::string& stop_reason);

}  // namespace anelab::serve
