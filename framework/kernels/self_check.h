// The silent-zeros self-check (issue 40 item 4). A device whose I/O layout differs from the profile's
// (row stride, slot order, symbol binding) returns zeros or shifted rows without an error. Before the
// first training step and the first prefill on the ANE, and as `anelab probe`'s summary line, one small
// program with the I/O types of the kernel about to run goes through the backend and through the
// emulator with the same device profile, and the outputs are compared.
//
// The program keeps the kernel's widths and dtype (what the row layout follows: row stride, padding) and at
// most kSelfCheckChannels of its channels (rows), so that it costs well under 1 % of a training step (a
// Stories110M attn_fwd input of 768 channels took 56 ms, 1.9-3.2 % of an emulator step; docs/macos.md):
// x [1, Ci, 1, Si] (the kernel's input type, Ci capped) -> y [1, Co, 1, So] (its output type, Co capped), So <= Si,
//   y[c, s] = x[c mod Ci, s] * 0.5 + 0.25
// on inputs x[c, s] = ((c * Si + s) mod 1024) / 64 - 8: every value and every intermediate is an fp16
// number (multiples of 2^-7 below 8 in magnitude), so a device that computes in fp16 matches the emulator
// exactly; the limit allows the two roundings of the program (2u = 2^-10 relative, u = 2^-11 for fp16).
// A wrong layout gives a relative difference near 1 (zeros) or above (shifted rows).
#pragma once
#include <string>

#include "framework/mil/types.h"
#include "framework/runtime/backend.h"

namespace anelab::kern {

struct SelfCheck {
  std::string backend;            // "ane"
  std::string device;             // device profile ("m4")
  std::string kernel;             // the kernel whose I/O types were checked ("attn_fwd", "prefill layer S=64")
  mil::TensorType input, output;  // the kernel's I/O types
  mil::TensorType checked_input, checked_output;  // the check program's: the same widths, <= kSelfCheckChannels
  double max_rel_diff = 0;                        // max |backend - emulator| / max |emulator| over the output
  double tolerance = 0;                           // kSelfCheckTolerance
  double ms = 0;                                  // wall time of the whole check (both compiles and evaluations)
  bool ok() const { return max_rel_diff <= tolerance; }
  // One line: "[self-check] ane m4 attn_fwd (in ..., out ...): agrees with the emulator, max rel diff 0 (limit
  // 0.000977)" or "...: DIFFERS from the emulator, max rel diff 1.3 (limit 0.000977): the device reads or
  // writes this I/O layout otherwise".
  std::string line() const;
  std::string json() const;  // the report written by write_self_check_report
};

inline constexpr double kSelfCheckTolerance = 1.0 / 1024;  // 2u, u = 2^-11 (fp16)
inline constexpr int64_t kSelfCheckChannels = 64;          // rows of the check program's tensors (at most)

// Runs the check on `backend` (a compile and one evaluation there and on a fresh emulator with the same
// profile). `output` must have rank 4 and a last dimension <= input's. Throws "[self-check] ..." when a
// compile or evaluation fails (the caller decides whether that stops it).
SelfCheck run_self_check(rt::Backend& backend, const std::string& kernel, const mil::TensorType& input,
                         const mil::TensorType& output);

// Writes c.json() to `path` atomically; returns false (and leaves nothing) when it cannot.
bool write_self_check_report(const SelfCheck& c, const std::string& path);

}  // namespace anelab::kern
