#include "infer/load.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <new>
#include <system_error>

#include "framework/core/error.h"
#include "framework/core/platform.h"
#include "infer/generate.h"
#include "models/io/adapter.h"
#include "models/io/load_any.h"

namespace anelab::infer {

std::unique_ptr<tok::Tokenizer> model_tokenizer(const models::Model& m, const LoadOptions& o, std::string* source) {
  std::unique_ptr<tok::Tokenizer> tk;
  std::string from;
  if (!o.tokenizer.empty())
    tk = tok::load_tokenizer(o.tokenizer), from = o.tokenizer;
  else if (m.vocab)
    tk = tok::make_tokenizer(*m.vocab), from = "embedded in " + o.model;
  else if (!m.tokenizer_path.empty())
    tk = tok::load_tokenizer(m.tokenizer_path), from = m.tokenizer_path;
  if (source) *source = from;
  return tk;
}

namespace {
// Bytes of a model path: the file, or the regular files of a directory (safetensors shards, a run directory).
double model_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return double(fs::file_size(path, ec));
  double total = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file(ec)) total += double(e.file_size(ec));
  return total;
}
}  // namespace

FileAccess resolve_file_access(const std::string& mode, const std::string& model, std::string* why) {
  auto say = [why](std::string s) {
    if (why) *why = std::move(s);
  };
  if (mode == "on") return say("--mmap on"), FileAccess::kMap;
  if (mode == "off") return say("--mmap off"), FileAccess::kRead;
  if (mode != "auto") fail("infer", "unknown --mmap '", mode, "' (choices: on, off, auto)");
  const auto thp = platform::transparent_huge_pages();
  if (!thp) return say("auto: " + thp.reason), FileAccess::kMap;
  const auto mem = platform::machine_memory();
  const double mib = model_bytes(model) / (1024.0 * 1024.0);
  if (!mem) return say("auto: available memory unknown (" + mem.reason + ")"), FileAccess::kMap;
  if (mib > mem->available_mb / 2) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "auto: the file (%.0f MiB) is more than half the available memory (%.0f MiB)", mib,
                  mem->available_mb);
    return say(buf), FileAccess::kMap;
  }
  return say("auto: " + *thp), FileAccess::kRead;
}

LoadedModel load_model(const LoadOptions& o, TokenizerUse use) {
  LoadedModel l;
  std::string why;
  const FileAccess access = resolve_file_access(o.mmap, o.model, &why);
  try {
    l.model = models::load_any_model(o.model, access);
  } catch (const std::bad_alloc&) {
    fail(o.component.c_str(), "out of memory loading ", o.model, " (", static_cast<int64_t>(model_bytes(o.model)) >> 20,
         " MiB, ", access == FileAccess::kRead ? "read into memory: --mmap on maps it instead" : "mapped",
         "); a smaller or more quantized model needs less");
  }
  if (o.lora_scale.size() > o.lora.size())
    fail(o.component.c_str(), "--lora-scale given ", o.lora_scale.size(), " times for ", o.lora.size(), " --lora");
  for (size_t i = 0; i < o.lora.size();
       ++i) {  // merged in the order given (the sum does not depend on it but rounding)
    models::LoraAdapter a = models::read_lora_adapter(o.lora[i], l.model.config);
    if (o.lora_runtime)
      l.adapters.push_back(std::move(a));
    else
      models::merge_lora(l.model, a, i < o.lora_scale.size() ? o.lora_scale[i] : 1.0f);
  }
  if (l.model.source_format == "checkpoint") {
    l.weights_memory = "fp32 matrices converted from the training checkpoint";
  } else if (access == FileAccess::kRead) {
    const auto huge = platform::anon_huge_pages_mb();
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.0f MiB in huge pages", huge ? *huge : 0.0);
    l.weights_memory =
        std::string(file_access_name(access)) + " (" + why + "; " + (huge ? std::string(buf) : huge.reason) + ")";
  } else {
    l.weights_memory = std::string(file_access_name(access)) + " (" + why + ")";
  }
  if (use != TokenizerUse::kNone) l.tokenizer = model_tokenizer(l.model, o, &l.tokenizer_source);
  if (!l.tokenizer && use == TokenizerUse::kRequired)
    fail(o.component.c_str(), o.model, " has no tokenizer: pass --tokenizer PATH");
  if (l.tokenizer) {
    check_tokenizer_fits(*l.tokenizer, l.tokenizer_source, l.model.config.vocab_size, o.model);
    l.chat = tok::chat_template_for(*l.tokenizer, o.chat_template, l.model.config.arch);
  }
  l.model.vocab.reset();  // the tokenizer holds its own copy; the engine needs none (Qwen2.5's: ~10 MB)
  EngineOptions& eo = l.engine;
  eo.quiet = o.quiet;
  eo.backend = o.backend;
  eo.device = o.device;
  eo.ane_weights = o.ane_weights;
  eo.dtype = o.dtype == "auto" ? auto_wtype(l.model) : parse_wtype(o.dtype);
  eo.keep_quantized = o.dtype == "auto";  // block-quantized matrices stay in their blocks (int8-activation GEMV)
  eo.threads = o.threads;
  eo.context = o.ctx;
  eo.kv_type = parse_kv_type(o.kv_type);
  return l;
}

void check_draft_vocabulary(const models::Model& target, const tok::Tokenizer* target_tk,
                            const std::string& target_name, const models::Model& draft, const tok::Tokenizer* draft_tk,
                            const std::string& draft_name, const std::string& component) {
  auto refuse = [&](const std::string& why) {
    fail(component.c_str(), "the draft model ", draft_name, " does not share the vocabulary of ", target_name, ": ",
         why, " (a draft model must be of the target's family: the same tokenizer)");
  };
  if (draft.config.vocab_size != target.config.vocab_size)
    refuse(cat("vocab_size ", draft.config.vocab_size, " against ", target.config.vocab_size));
  if (!target_tk || !draft_tk) return;
  const auto& a = target_tk->vocab().tokens;
  const auto& b = draft_tk->vocab().tokens;
  // Token texts compared where both tokenizers define them (a GGUF pads its list to vocab_size, a tokenizer.json not).
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) refuse(cat("token ", i, " differs"));
}

LoadedModel load_draft_model(const LoadOptions& target, const std::string& draft, int64_t ctx, int64_t slots,
                             const models::Model& target_model, const tok::Tokenizer* target_tk) {
  LoadOptions o = target;
  o.model = draft;
  o.tokenizer.clear();
  o.lora.clear(), o.lora_scale.clear();
  o.ctx = ctx;
  LoadedModel l = load_model(o, TokenizerUse::kIfAny);
  check_draft_vocabulary(target_model, target_tk, target.model, l.model, l.tokenizer.get(), draft, o.component);
  if (has_recurrent_state(l.model.config))
    fail(o.component.c_str(), "the draft model ", draft, " (", l.model.config.arch,
         ") has linear-attention layers: their recurrent state cannot drop rejected drafts");
  l.engine.slots = slots;
  return l;
}

}  // namespace anelab::infer
