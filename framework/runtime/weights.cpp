#include "framework/runtime/weights.h"

#include "framework/core/file.h"
#include "framework/mil/blob.h"

namespace anelab::rt {

namespace {
constexpr std::string_view kPrefix = "@model_path/";

template <typename F>
void for_each_blob(const mil::Program& program, F&& f) {
  for (const auto& fn : program.functions)
    for (const auto& op : fn.ops)
      for (const auto& [key, v] : op.attrs)
        if (v.blob) f(fn, op, v);
}
}  // namespace

std::set<std::string> blob_paths(const mil::Program& program) {
  std::set<std::string> out;
  for_each_blob(program, [&](const mil::Function&, const mil::Operation&, const mil::ConstValue& v) {
    out.insert(v.blob->path);
  });
  return out;
}

Weights load_weights(const mil::Program& program, const std::string& model_dir) {
  Weights w;
  for (const auto& path : blob_paths(program)) {
    ANELAB_CHECK(path.rfind(kPrefix, 0) == 0, "weights", "BLOBFILE path '", path,
                 "' does not start with @model_path/ (the only form the ANE accepts)");
    std::string rel = path.substr(kPrefix.size());
    ANELAB_CHECK(rel.find("..") == std::string::npos && !rel.empty() && rel[0] != '/', "weights", "BLOBFILE path '",
                 path, "' escapes the model directory");
    std::string file = model_dir + "/" + rel;
    try {
      w[path] = std::make_shared<const std::vector<uint8_t>>(read_file_bytes(file));
    } catch (const Error& e) {
      fail("weights", "BLOBFILE '", path, "' of the program: ", e.what());
    }
  }
  return w;
}

Status check_weights(const mil::Program& program, const Weights& weights) {
  Status result;
  for_each_blob(program, [&](const mil::Function& fn, const mil::Operation& op, const mil::ConstValue& v) {
    if (!result.is_ok()) return;
    std::string where = cat("function '", fn.name, "': ", op.op, " '", op.name, "'",
                            op.line ? cat(" (line ", op.line, ")") : std::string());
    auto it = weights.find(v.blob->path);
    if (it == weights.end()) {
      std::string known;
      for (const auto& [k, b] : weights) known += (known.empty() ? "" : ", ") + k;
      result = Status(Code::kInvalidArgument,
                      cat("[weights] ", where, ": BLOBFILE '", v.blob->path,
                          "' is not in the weights dictionary (have: ", known.empty() ? "none" : known, ")"));
      return;
    }
    try {
      mil::BlobReader r(*it->second, v.blob->path);
      r.payload(v.blob->offset, v.type);
    } catch (const Error& e) {
      result = Status(Code::kInvalidArgument, cat("[weights] ", where, ": ", e.what()));
    }
  });
  return result;
}

}  // namespace anelab::rt
