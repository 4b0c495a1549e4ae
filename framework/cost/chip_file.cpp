// Chip parameter files (schema anelab.chip/2): what `anelab estimate --calibrate probe.json --save chip.json` writes
// and `--device-file chip.json` reads back. One JSON object: schema, name, family, description and every number of
// Chip (cost.h), each a positive number. Unknown keys are refused, so a misspelt field does not fall back silently.
#include <cmath>
#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/core/file.h"
#include "framework/cost/cost.h"

namespace anelab::cost {

namespace {

using nlohmann::json;

constexpr const char* kChipSchema = "anelab.chip/2";

// Every number of Chip with its JSON key, in the order the file lists them.
struct ChipField {
  const char* key;
  double Chip::*field;
};
constexpr ChipField kChipFields[] = {
    {"peak_fp16_tflops", &Chip::peak_fp16_tflops},
    {"s_half", &Chip::s_half},
    {"int8_speedup", &Chip::int8_speedup},
    {"dram_gbps", &Chip::dram_gbps},
    {"sram_mb", &Chip::sram_mb},
    {"dispatch_us", &Chip::dispatch_us},
    {"compile_ms", &Chip::compile_ms},
    {"host_gflops", &Chip::host_gflops},
    {"host_gemm_units", &Chip::host_gemm_units},
    {"host_gbps", &Chip::host_gbps},
    {"staging_gbps", &Chip::staging_gbps},
};

}  // namespace

std::string chip_to_json(const Chip& c) {
  json j{{"schema", kChipSchema}, {"name", c.name}, {"family", c.family}, {"description", c.description}};
  for (const ChipField& f : kChipFields) j[f.key] = c.*f.field;
  return j.dump(2) + "\n";
}

Chip chip_from_json(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("cost", src, ": not JSON (", e.what(), ")");
  }
  ANELAB_CHECK(j.is_object(), "cost", src, ": not a chip parameter file (expected a JSON object)");
  ANELAB_CHECK(j.contains("schema") && j["schema"].is_string() && j["schema"].get<std::string>() == kChipSchema, "cost",
               src, ": field 'schema' is ", j.contains("schema") ? j["schema"].dump() : std::string("missing"),
               ", expected \"", kChipSchema,
               "\" (write one with `anelab estimate --calibrate probe.json --save FILE`)");
  Chip c;
  for (const char* key : {"name", "family", "description"}) {
    ANELAB_CHECK(j.contains(key) && j[key].is_string(), "cost", src, ": field '", key, "' is ",
                 j.contains(key) ? j[key].dump() : std::string("missing"), ", expected a string");
  }
  c.name = j["name"].get<std::string>();
  c.family = j["family"].get<std::string>();
  c.description = j["description"].get<std::string>();
  ANELAB_CHECK(!c.name.empty(), "cost", src, ": field 'name' is empty");
  bool known_family = false;
  for (const Chip& k : chips()) known_family = known_family || k.family == c.family;
  ANELAB_CHECK(known_family, "cost", src, ": field 'family' is '", c.family,
               "', not a chip family (m1, m2, m3, m4, m5)");
  for (const ChipField& f : kChipFields) {
    ANELAB_CHECK(j.contains(f.key) && j[f.key].is_number() && j[f.key].get<double>() > 0 &&
                     std::isfinite(j[f.key].get<double>()),
                 "cost", src, ": field '", f.key, "' is ", j.contains(f.key) ? j[f.key].dump() : std::string("missing"),
                 ", expected a positive number");
    c.*f.field = j[f.key].get<double>();
  }
  ANELAB_CHECK(c.host_gemm_units == 1 || c.host_gemm_units == 2, "cost", src, ": field 'host_gemm_units' is ",
               j["host_gemm_units"].dump(),
               ", expected 1 or 2 (the matrix units the trainer's two GEMM threads reach)");
  for (const auto& [k, v] : j.items()) {
    bool known = k == "schema" || k == "name" || k == "family" || k == "description";
    for (const ChipField& f : kChipFields) known = known || k == f.key;
    ANELAB_CHECK(known, "cost", src, ": unknown field '", k, "'");
  }
  return c;
}

void save_chip(const Chip& c, const std::string& path) { write_file_atomic(path, chip_to_json(c)); }

Chip load_chip(const std::string& path) { return chip_from_json(read_file_text(path), path); }

}  // namespace anelab::cost
