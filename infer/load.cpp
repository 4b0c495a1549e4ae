#include "infer/load.h"

#include "framework/core/error.h"
#include "infer/generate.h"
#include "models/formats/load_any.h"

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

LoadedModel load_model(const LoadOptions& o, TokenizerUse use) {
  LoadedModel l;
  l.model = models::load_any_model(o.model);
  if (use != TokenizerUse::kNone) l.tokenizer = model_tokenizer(l.model, o, &l.tokenizer_source);
  if (!l.tokenizer && use == TokenizerUse::kRequired)
    fail(o.component.c_str(), o.model, " has no tokenizer: pass --tokenizer PATH");
  if (l.tokenizer) {
    check_tokenizer_fits(*l.tokenizer, l.tokenizer_source, l.model.config.vocab_size, o.model);
    l.chat = tok::chat_template_for(*l.tokenizer, o.chat_template);
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

}  // namespace anelab::infer
