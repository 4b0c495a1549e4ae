// Whether a test binary runs under user-mode emulation (qemu-user, as the aarch64 suite does in CI).
#pragma once
#include <fstream>
#include <string>

namespace anelab::test {

// Non-empty ("user-mode emulation: /bin/sh has ELF machine N") when the host's /bin/sh is an ELF for another
// machine than this binary's: the process runs inside qemu-user, whose own memory, /proc answers and
// timing are then part of what the test sees.
inline std::string user_mode_emulation() {
  std::ifstream sh("/bin/sh", std::ios::binary);
  unsigned char h[20] = {};
  if (!sh.read(reinterpret_cast<char*>(h), sizeof h) || h[0] != 0x7f || h[1] != 'E') return "";
  const int machine = h[18] | (h[19] << 8);  // e_machine, little-endian on every host we build for
#if defined(__aarch64__)
  constexpr int kSelf = 183;  // EM_AARCH64
#elif defined(__x86_64__)
  constexpr int kSelf = 62;  // EM_X86_64
#else
  constexpr int kSelf = -1;
#endif
  if (kSelf < 0 || machine == kSelf) return "";
  return "user-mode emulation: /bin/sh has ELF machine " + std::to_string(machine);
}

}  // namespace anelab::test
