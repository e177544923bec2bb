# CMake toolchain file: cross-compile for aarch64 Linux with Debian's clang-19 + lld-19 and the
# aarch64 GNU cross libc/libstdc++ (packages clang-19 lld-19 g++-aarch64-linux-gnu; see
# scripts/test-arm64.sh, which installs them). Executables are linked statically, so they run as
#   qemu-aarch64 -cpu max ./program
# without -L. Set ONNXPLEX_ARM64_STATIC=OFF for dynamic executables; then the glibc linker
# scripts' absolute paths do not resolve inside CMAKE_SYSROOT with lld, so this file drops the
# sysroot for that case and lets clang find the Debian cross layout itself (run those with
# qemu-aarch64 -L /usr/aarch64-linux-gnu). Shared libraries need the same setting: the _kleidi
# Python extension module is built with ONNXPLEX_ARM64_STATIC=OFF (test-arm64.sh target python).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(ONNXPLEX_ARM64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER clang-19)
set(CMAKE_CXX_COMPILER clang++-19)
set(CMAKE_C_COMPILER_TARGET ${ONNXPLEX_ARM64_TRIPLE})    # CMake adds --target=aarch64-linux-gnu
set(CMAKE_CXX_COMPILER_TARGET ${ONNXPLEX_ARM64_TRIPLE})
set(CMAKE_ASM_COMPILER_TARGET ${ONNXPLEX_ARM64_TRIPLE})

if(NOT DEFINED ONNXPLEX_ARM64_STATIC)
  set(ONNXPLEX_ARM64_STATIC ON)
endif()
# Let try_compile (compiler checks) see the same choice.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ONNXPLEX_ARM64_STATIC)

# The GCC cross installation (crtbegin*.o, libgcc, libstdc++ headers and libraries). With a
# --sysroot clang stops looking for it outside the sysroot, so name it: the newest version found.
file(GLOB _onnxplex_gcc_dirs LIST_DIRECTORIES true "/usr/lib/gcc-cross/${ONNXPLEX_ARM64_TRIPLE}/*")
set(_onnxplex_gcc_dir "")
set(_onnxplex_gcc_version "0")
foreach(_dir IN LISTS _onnxplex_gcc_dirs)
  get_filename_component(_ver "${_dir}" NAME)
  if(EXISTS "${_dir}/crtbegin.o" AND _ver VERSION_GREATER _onnxplex_gcc_version)
    set(_onnxplex_gcc_dir "${_dir}")
    set(_onnxplex_gcc_version "${_ver}")
  endif()
endforeach()
if(NOT _onnxplex_gcc_dir)
  message(FATAL_ERROR "No aarch64 GCC cross installation under /usr/lib/gcc-cross/"
                      "${ONNXPLEX_ARM64_TRIPLE}: apt-get install g++-aarch64-linux-gnu")
endif()

if(ONNXPLEX_ARM64_STATIC)
  set(CMAKE_SYSROOT /usr/${ONNXPLEX_ARM64_TRIPLE})
  set(_onnxplex_flags "--gcc-install-dir=${_onnxplex_gcc_dir}")
  set(_onnxplex_link "-fuse-ld=lld -static")
else()
  # clang's Debian multiarch detection finds /usr/lib/gcc-cross and /usr/aarch64-linux-gnu.
  set(CMAKE_FIND_ROOT_PATH /usr/${ONNXPLEX_ARM64_TRIPLE})
  set(_onnxplex_flags "")
  set(_onnxplex_link "-fuse-ld=lld")
endif()

set(CMAKE_C_FLAGS_INIT "${_onnxplex_flags}")
set(CMAKE_CXX_FLAGS_INIT "${_onnxplex_flags}")
set(CMAKE_ASM_FLAGS_INIT "${_onnxplex_flags}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_onnxplex_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-fuse-ld=lld")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "-fuse-ld=lld")

# Host programs from the host; headers, libraries and packages only from the target side.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# `ctest` / try_run through QEMU when the caller says where it is (test-arm64.sh exports it).
if(DEFINED ENV{ONNXPLEX_QEMU_AARCH64} AND NOT CMAKE_CROSSCOMPILING_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR "$ENV{ONNXPLEX_QEMU_AARCH64};-cpu;max")
endif()
