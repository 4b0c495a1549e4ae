// Building the weights dictionary a backend receives (digest §1.3) from a model directory laid out
// like the private API's temp dir: DIR/weights/<file>.bin for "@model_path/weights/<file>.bin".
#pragma once
#include <set>
#include <string>

#include "framework/mil/ir.h"
#include "framework/runtime/backend.h"

namespace anelab::rt {

// Every BLOBFILE path referenced by any function of the program (const `val`s and constexpr_* attrs).
std::set<std::string> blob_paths(const mil::Program& program);

// Reads each referenced blob from model_dir ("@model_path/" replaced by "model_dir/"). Throws
// "[weights] PROG: BLOBFILE path X: cannot open DIR/X: ..." naming the path; rejects paths that do
// not start with "@model_path/" or that escape the directory ("..").
Weights load_weights(const mil::Program& program, const std::string& model_dir);

// Validates that every BLOBFILE const of the program resolves in `weights`: the key exists, the
// chunk header at the offset is valid and its data_size matches the const's type.
Status check_weights(const mil::Program& program, const Weights& weights);

}  // namespace anelab::rt
