# Cross toolchain: Linux aarch64 with Debian's g++-aarch64-linux-gnu (sysroot /usr/aarch64-linux-gnu).
# Used by scripts/cross/aarch64-linux.sh, which also stages the dependencies:
#   ANELAB_CROSS_DEPS  a prefix with the header-only libraries (symlinks to exactly their /usr/include
#                      directories, never /usr/include itself), their CMake package files, and GoogleTest
#                      built for aarch64. Searched like a sysroot.
# Tests run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR) with the arm64 multiarch runtime (`-L /`: the
# guest's /lib/ld-linux-aarch64.so.1 and /lib/aarch64-linux-gnu), the same runtime that binaries the tests spawn
# themselves get through binfmt_misc (qemu-user-binfmt). Not the cross sysroot's libc: under Debian 12's
# qemu-user 7.2, a dynamically linked program on libc6-arm64-cross 2.36-8cross1 spins forever inside its first
# pthread_create (a 5-line std::thread program hangs); on libc6:arm64 2.36-9+deb12u14 it runs.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(ANELAB_CROSS_SYSROOT /usr/aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# try_compile projects re-read this file: pass the staging prefix on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ANELAB_CROSS_DEPS)
set(CMAKE_FIND_ROOT_PATH ${ANELAB_CROSS_SYSROOT} ${ANELAB_CROSS_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# No host .pc files (the GUI's ImGui/GLFW are x86 libraries here: the dashboard builds without the GUI).
set(ENV{PKG_CONFIG_LIBDIR} "${ANELAB_CROSS_DEPS}/lib/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")

# Shared libraries from arm64 multiarch packages need their own dependencies at link time.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,/usr/lib/aarch64-linux-gnu:/lib/aarch64-linux-gnu")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,/usr/lib/aarch64-linux-gnu:/lib/aarch64-linux-gnu")

if(NOT CMAKE_CROSSCOMPILING_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;/)
endif()
