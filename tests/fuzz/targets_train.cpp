// Fuzz targets over the trainer's configuration files: an experiment TOML (`anelab train --config`) and
// a run directory's saved config.json (`anelab train --resume`), each resolved and validated as the
// command does.
#include <nlohmann/json.hpp>
#include <string_view>

#include "tests/fuzz/targets.h"
#include "train/config.h"

namespace anelab::fuzz {

int run_train_toml(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  return accepted([&] {
    train::TrainConfig c;
    train::apply_toml_text(c, text, "/fuzz/experiment.toml");
    train::resolve_names(c);
    train::validate(c);
  });
}

int run_run_config(const uint8_t* data, size_t size) {
  return accepted([&] {
    const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
    if (j.is_discarded()) fail("train", "<fuzz>/config.json: not valid JSON");  // as `anelab train --resume`
    train::TrainConfig c;
    train::apply_json(c, j);
    train::resolve_names(c);
    train::validate(c);
  });
}

}  // namespace anelab::fuzz
