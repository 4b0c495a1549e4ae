// The inference engine's options (infer/engine.h), and what a prefill reports; apart so that the MIL prefill
// (infer/prefill_mil.h) reads them without the engine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "framework/quant/mat.h"
#include "framework/runtime/device_profile.h"
#include "infer/cpu_attention.h"

namespace anelab::infer {

struct EngineOptions {
  std::string backend = "cpu";  // prefill backend: "auto" (resolved at construction) | "cpu" | "emulator" | "ane"
  std::string device = rt::kDefaultDevice;  // device profile for emulator / ane ("auto": the chip's)
  quant::WType dtype = quant::WType::kF16;  // compute dtype of the weight matrices (fp32 or fp16)
  bool keep_quantized =
      false;  // block-quantized matrices (q8_0, q4_0, q5_0, q5_1, q4_k, q5_k, q6_k) used as they are, not converted
  int threads = 2;
  int64_t context = 0;            // KV-cache positions; 0 = the model's max_seq_len
  KvType kv_type = KvType::kF32;  // KV-cache element type: fp32, or fp16 (half the memory; rounded when written)
  int64_t prefill_chunk = 256;    // CPU prefill processes at most this many tokens per pass
  int64_t slots = 1;   // sequences with their own KV cache (Engine::use_slot, decode_batch): the server's --parallel
  bool quiet = false;  // no notes or progress lines (kernel compiles) on stderr
  int compile_budget = -1;           // backend compile budget override (-1: the device profile's)
  std::string ane_weights = "fp16";  // MIL prefill weights: fp16 | int8 | w8a8 | q4 | lut4 | lut6 | auto (the device
                                     // profile's), prefill_mil.h
  std::vector<int32_t> calibration_tokens;  // w8a8 activation calibration prompt (empty: the first prompt)
  bool row_tiles = true;                    // keep_quantized Q8_0 / Q4_K matrices become row tiles (Engine::tiled_rows)
};

struct PrefillStats {
  std::string path;  // "cpu" or "emulator"/"ane" (+ bucket)
  int64_t bucket = 0;
  double compile_ms = 0, run_ms = 0;
  std::string weights;  // MIL path: the kernels' weights, "fp16" | "int8" | "w8a8" | "q4" | "lut4" | "lut6"
                        // (rt::weight_path_name); auto with an FFN class: "w8a8 (ffn lut4)"
  double matrix_bytes_per_weight = 0;  // MIL path: bytes of the baked weight-matrix blobs per matrix element
};

}  // namespace anelab::infer
