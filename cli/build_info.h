#pragma once
// What the build knows about itself, from a file that cli/CMakeLists.txt generates at configure time
// (build_info.cpp.in): compiled on its own, so a new commit recompiles one line, not a subcommand file.

namespace anelab::cli {

// `git describe --always --dirty --abbrev=12` of the source tree at configure time; "unknown" outside git.
const char* build_commit();

}  // namespace anelab::cli
