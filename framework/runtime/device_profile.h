// Device profiles: the documented limits of each ANE generation (../shared/reference/ane_digest.md
// §2.6, §4.3, §4.4, §1.11), enforced by every backend at compile time (check_program) and at
// evaluate time (check_surfaces), with messages that name the function, value, op and limit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/mil/ir.h"

namespace anelab::rt {

class Surface;

struct DeviceProfile {
  std::string name;            // "m1" ... "m5"
  std::string description;     // human-readable chip family
  mil::Dialect dialect;        // program(1.3)/ios18 on M4/M5, program(1.0)/ios16 on M1-M3
  bool supports_cast = true;   // `cast` unsupported on M1/M2 (digest §2.6.2): use fp16 I/O
  bool accepts_ios18 = true;   // may the program use the ios18 dialect at all
  int64_t min_spatial_fp16 = 32;      // last-dim extent of fp16 I/O tensors (else silent zeros)
  int64_t min_spatial_fp32 = 16;      // same for fp32 I/O
  size_t min_surface_bytes = 49152;   // smallest working IOSurface allocation
  int64_t max_dim = 65536;            // per-dimension cap of any tensor in the program
  int64_t max_conv_cin = 16384;       // conv input channels: 32000 rejected, 14336 works (digest §4.3) [inference]
  bool sdpa_mask_ignored = true;      // scaled_dot_product_attention ignores attn_mask: reject it
  bool multi_io_slot_order = false;   // M1 report: input sizes strictly ascending, outputs strictly descending
  int compile_budget = 100;           // compiles planned per process: a margin below the ~119 where the
                                      // compiler starts failing (§1.11); maderix's MAX_COMPILES 100
  double peak_fp16_tflops = 0;        // for reports only
};

// Known profiles: m1, m2, m3, m4 (default), m5. Throws listing the names for an unknown one.
const DeviceProfile& device_profile(const std::string& name);
std::vector<std::string> device_profile_names();
inline const char* kDefaultDevice = "m4";

// Static checks of a whole program against a profile (all functions). Returns kLimitExceeded or
// kInvalidArgument with a message naming function, value/op and the rule.
Status check_program(const mil::Program& program, const DeviceProfile& profile);

// Evaluate-time checks of the surfaces bound to one function: count and types match the signature,
// allocation >= min_surface_bytes, multi-input surfaces all >= the largest I/O tensor (digest §4.3),
// and the slot-order rule where the profile has it.
Status check_surfaces(const mil::Function& fn, std::span<Surface* const> inputs, std::span<Surface* const> outputs,
                      const DeviceProfile& profile);

// Allocation size the device needs for a tensor of this type: max(bytes, min_surface_bytes) rounded
// up to 16 KiB pages (digest §1.5, §4.3).
size_t surface_alloc_bytes(const mil::TensorType& t, const DeviceProfile& profile);

}  // namespace anelab::rt
