#include "models/io/load_any.h"

#include <filesystem>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "models/arch/arch.h"
#include "models/arch/tensors.h"
#include "models/formats/anelab_file.h"
#include "models/formats/checkpoint_file.h"
#include "models/formats/gguf.h"
#include "models/formats/llama2c.h"
#include "models/formats/safetensors.h"
#include "models/io/gguf_model.h"
#include "models/io/hf_model.h"

namespace anelab::models {

std::string detect_model_format(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) fail("model", path, ": no such file or directory");
  if (is_run_dir(path)) return "checkpoint";
  if (fs::is_directory(path) || path.ends_with(".index.json")) return "safetensors";
  MappedFile f(path);
  if (looks_like_anelab(f.data(), f.size())) return "anelab";
  if (looks_like_checkpoint(f.data(), f.size())) return "checkpoint";
  if (looks_like_gguf(f.data(), f.size())) return "gguf";
  if (looks_like_safetensors(f.data(), f.size())) return "safetensors";
  if (looks_like_llama2c(f.data(), f.size())) return "llama2c";
  fail("model", path,
       ": not a recognised model file (tried anelab, training checkpoint, GGUF, safetensors, llama2.c legacy/v1; a "
       "llama2.c "
       "legacy file must have exactly the size its header implies)");
}

namespace {
Model read_model(const std::string& path, const std::string& fmt, FileAccess access) {
  if (fmt == "anelab") return read_anelab_file(path, access);
  if (fmt == "checkpoint") return read_checkpoint_model(path, canonical_tensors);
  if (fmt == "gguf") return read_gguf(path, access);
  if (fmt == "safetensors") return read_hf_safetensors(path, access);
  return read_llama2c(path, access);
}
}  // namespace

Model load_any_model(const std::string& path, FileAccess access) {
  const std::string fmt = detect_model_format(path);
  Model m = read_model(path, fmt, access);
  validate_config(m.config, path);  // the readers check the generic fields; the architecture's rules here
  drop_legacy_params(&m.config);
  if (fmt == "anelab" || fmt == "llama2c") check_complete(m, path);       // the GGUF / HF / checkpoint readers check
  m.private_memory = access == FileAccess::kRead && fmt != "checkpoint";  // read into own memory (checkpoints map)
  return m;
}

}  // namespace anelab::models
