# Cross toolchain: macOS arm64 (Mach-O) from Linux with Zig 0.11's clang, which ships Darwin's libc headers
# and libc++ and links Mach-O without an Apple SDK. scripts/cross/aarch64-macos.sh installs Zig, stages the
# dependencies in ANELAB_MACOS_SYSROOT and configures with this file; see docs/macos.md.
#   - the compilers are the wrappers in scripts/cross/ (zig cc/c++ -target aarch64-macos), ar/ranlib Zig's;
#   - no -arch, -isysroot or -mmacosx-version-min from CMake's Darwin platform: the target comes from
#     -target, the headers from Zig;
#   - no Apple SDK, so no Apple frameworks: ANELAB_APPLE_FRAMEWORKS=OFF leaves the Objective-C++ ANE shim
#     and the dashboard GUI out (the "ane" backend uses shim_none.cpp, the dashboard gui_stub.cpp);
#   - libraries and packages are found only in ANELAB_MACOS_SYSROOT (never the host's /usr), programs
#     (pkg-config, python3) on the host.
set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR arm64)

get_filename_component(_anelab_wrappers "${CMAKE_CURRENT_LIST_DIR}/../../scripts/cross" ABSOLUTE)
set(CMAKE_C_COMPILER "${_anelab_wrappers}/zig-cc")
set(CMAKE_CXX_COMPILER "${_anelab_wrappers}/zig-c++")
set(CMAKE_AR "${_anelab_wrappers}/zig-ar" CACHE FILEPATH "Archiver (zig ar)")
set(CMAKE_RANLIB "${_anelab_wrappers}/zig-ranlib" CACHE FILEPATH "Ranlib (zig ranlib)")

set(CMAKE_OSX_ARCHITECTURES "" CACHE STRING "Empty: no -arch flags (zig's -target names the architecture)" FORCE)
set(CMAKE_OSX_SYSROOT "" CACHE PATH "Empty: no -isysroot (zig ships Darwin's headers)" FORCE)
set(CMAKE_OSX_DEPLOYMENT_TARGET "" CACHE STRING "Empty: zig's default macOS version for the target" FORCE)
# zig cc does not take CMake's precompiled-header flags (-x c++-header: "language 'h' is unsupported").
set(CMAKE_DISABLE_PRECOMPILE_HEADERS ON)
set(ANELAB_APPLE_FRAMEWORKS OFF CACHE BOOL "No Apple SDK in the Zig cross build: no Objective-C++ shim, no GUI")

if(ANELAB_MACOS_SYSROOT)
  set(CMAKE_FIND_ROOT_PATH "${ANELAB_MACOS_SYSROOT}")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ANELAB_MACOS_SYSROOT)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
