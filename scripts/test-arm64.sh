#!/usr/bin/env bash
# Arm test suite under emulation: cross-compile for aarch64 and run under QEMU user-mode emulation
# on every CPU the Kleidi kernels must handle - native C++ test executables, and the kleidi_sme2
# provider's Python tests on an emulated aarch64 CPython.
#
#   scripts/test-arm64.sh [target ...]
#
# Targets:
#   arm_smoke    its own CMake project, tests/native/arm_smoke (always available)
#   kleidi_test  (or any executable target of the CMake project in $ARM64_SOURCE_DIR; default: the
#                repository's top-level project, configured with -DONNXPLEX_BUILD_PYTHON_MODULE=OFF
#                -DONNXPLEX_BUILD_NATIVE_TESTS=ON)
#   python       pytest tests/providers/kleidi_sme2 (+ xnnpack_like/test_arm64_kleidi.py, test_mempattern.py) under Debian's aarch64 python3.11 (below)
# With no target: arm_smoke, plus kleidi_test once tests/native/kleidi_test.cpp exists and the
# top-level CMakeLists.txt builds it.
#
# CPU configurations (native runs get --expect-variant; arm_smoke also gets --expect-svl; python
# runs get ONNXPLEX_KLEIDI_EXPECT):
#   sme2-vl128 .. sme2-vl2048   -cpu max,sme-default-vector-length=16|32|64|128|256 (bytes)  sme2
#   i8mm-nosme                  -cpu max,sme=off                                              i8mm
#   neon-a72                    -cpu cortex-a72                                               neon
# Native targets run on all seven (or $ARM64_CONFIGS); python on sme2-vl512, i8mm-nosme and
# neon-a72 (or $ARM64_PY_CONFIGS).
#
# What it does, idempotently (installs and downloads are skipped when already done; builds are
# incremental):
#   1. apt-get installs Debian's clang-19, lld-19, the aarch64 cross libc/libstdc++
#      (g++-aarch64-linux-gnu), binutils for aarch64, cmake and ninja (root needed only then).
#   2. Fetches qemu-aarch64 11.x: Debian bookworm's QEMU (7.2) and bookworm-backports' (10.0) cannot
#      execute SME2, trixie-backports' can. The .deb is fetched with apt-get download through a
#      private apt configuration under the cache (the system's apt sources are left alone), whose
#      single source entry is derived from the machine's own Debian source entry (same URIs and
#      Signed-By, Suites: trixie-backports); only the static usr/bin/qemu-aarch64 is extracted.
#      Nothing is installed.
#   3. Configures and builds each native target with CMake and scripts/aarch64-clang19.cmake
#      (static executables), and refuses a binary that contains the SME ABI support routines.
#   4. Target python only (host-side helpers in scripts/arm64_python.py):
#      a. an aarch64 sysroot (<cache>/sysroot): `dpkg --add-architecture arm64` and `apt-get
#         update` if needed (root), then `apt-get download` of the arm64 python3.11 and the
#         libraries it and its extension modules load ($PY_DEBS), from the machine's own Debian
#         release, each unpacked with dpkg-deb -x. Nothing is installed.
#      b. an aarch64 site (<cache>/python/site): `pip download --only-binary=:all: --platform
#         manylinux2014_aarch64 --platform manylinux_2_17..2_<sysroot glibc>_aarch64` of the
#         project's runtime dependencies and pytest, at the host's installed versions where
#         aarch64 wheels exist, unzipped; x86-64 binaries are refused.
#      c. the _kleidi extension module cross-compiled against the sysroot's Python headers
#         (pybind11's CMake files from the host), named with the sysroot Python's EXT_SUFFIX;
#         cpu_mlas's _mlas_native is cross-compiled beside it with the same -Werror flags, as a
#         build check only (not installed: the python runs keep cpu_mlas's numpy paths, which
#         QEMU runs in reasonable time).
#      d. an install tree laid out like the wheel ([tool.scikit-build.wheel.packages]) with an
#         onnxplex-<version>.dist-info whose entry_points.txt comes from pyproject.toml (the
#         providers are found only through entry points).
#      e. every aarch64 .so (Python's lib-dynload, the site, the module) resolved by the sysroot's
#         dynamic loader (ld.so --list under QEMU): a missing library fails here, by name.
#      f. bytecode compiled once by the host's Python (same 3.11 bytecode) into a pycache prefix
#         under the cache, and the whole-model cases of tests/providers/kleidi_sme2/arm64_models.py
#         (a ResNet-18, a dynamic-int8 transformer, an int4 MLP: models, feeds, x86 outputs)
#         written by the host's Python (needs onnxruntime there, to quantize) for the Arm
#         comparison (ONNXPLEX_ARM64_CASE_DIR).
#   5. Runs each target under each of its CPU configurations (in parallel, $ARM64_JOBS at a time,
#      the python runs first) and fails loudly - printing the run's log tail - if any run fails or
#      times out. A python run is
#        cd <repo> && env -i PYTHONHOME=<sysroot>/usr PYTHONPATH=<install>:<site> PYTHONNOUSERSITE=1
#          PYTHONPYCACHEPREFIX=<cache>/python/pycache ONNXPLEX_KLEIDI_EXPECT=<level> ...
#          qemu-aarch64 -L <sysroot> -cpu <cpu> <sysroot>/usr/bin/python3.11 -m pytest
#          -p no:cacheprovider tests/providers/kleidi_sme2 tests/providers/xnnpack_like/test_arm64_kleidi.py tests/test_mempattern.py
#      with nothing forcing a Kleidi variant. Deselected: test_kernels.py's
#      test_native_kleidi_test_executable (it would build and run an x86 kleidi_test with the
#      host's cmake; the native targets cover kleidi_test on every CPU). The install holds the
#      aarch64 builds of _kleidi and of the core's _runloop (the executor's C loop) and
#      _mempattern; cpu_mlas's _mlas_native is only compiled and linked (a build check: its
#      tests compare with onnxruntime, which the site lacks). Skipped there, 16 of the
#      173 selected at the time of writing (the same on all three CPUs): 9 onnxruntime-oracle
#      comparisons (importorskip: the site has no onnxruntime; test_matmulnbits_mlp skips only its
#      final oracle check, after its cpu_mlas comparison ran), the 2 tests of
#      test_quantized_transformer.py that quantize with onnxruntime, 1 x86-only test
#      (test_off_arm_available_only_when_forced) and the 4 x86 sides of test_arm64_models.py
#      (whose Arm side, test_matches_the_x86_run, runs the three whole models of the x86 cases);
#      3 more, those, when the host has no onnxruntime. Each PASS/FAIL line carries pytest's
#      summary line.
#      Timings (2 cores, a machine shared with other builds): warm cache ~30 s for the target
#      (three runs of 10-20 s, 2 at a time: 1 at a time took ~45 s, 3 at a time no less than 2);
#      cold cache (sysroot, wheels, module build) ~1m45 s.
# Exit status: 0 when every run passed; nonzero otherwise.
#
# Environment:
#   ARM64_CACHE        cache folder (default: <repo>/.cache/arm64, git-ignored)
#   ARM64_SOURCE_DIR   CMake project holding targets other than arm_smoke (default: the repo)
#   ARM64_CMAKE_ARGS   extra arguments for the native targets' CMake configure step (word-split)
#   ARM64_TEST_ARGS    extra arguments for every native test run (word-split)
#   ARM64_PYTEST_ARGS  extra arguments for every python run's pytest (word-split), e.g. -x
#   ARM64_CONFIGS      space-separated subset of the configuration names above (native targets)
#   ARM64_PY_CONFIGS   configurations for the python target (default: sme2-vl512 i8mm-nosme
#                      neon-a72)
#   ARM64_HOST_PYTHON  the host's Python 3.11 for pip, CMake and the helpers (default: python3)
#   ARM64_JOBS         runs in parallel (default: nproc)
#   ARM64_TIMEOUT      seconds allowed per run (default 1800)
#   ONNXPLEX_QEMU_AARCH64  use this qemu-aarch64 (must be >= 11) instead of fetching one
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${ARM64_CACHE:-$REPO/.cache/arm64}
TOOLCHAIN_FILE=$REPO/scripts/aarch64-clang19.cmake
JOBS=${ARM64_JOBS:-$(nproc)}
TIMEOUT=${ARM64_TIMEOUT:-1800}
QEMU_MIN_MAJOR=11
QEMU_SUITE=trixie-backports
PACKAGES=(clang-19 lld-19 g++-aarch64-linux-gnu binutils-aarch64-linux-gnu cmake ninja-build)
# SME ABI support routines (AAPCS64): compiler-generated streaming/ZA code calls them; libgcc < 14
# lacks them and the project's kernels must not need them.
SME_ABI_ROUTINES='__arm_tpidr2_save|__arm_tpidr2_restore|__arm_za_disable|__arm_sme_state|__arm_get_current_vg|__arm_sme_save|__arm_sme_restore|__arm_sme_state_size'

# The python target: Debian's aarch64 python3.11 and the libraries it and its extension modules
# (lib-dynload, the wheels, _kleidi) load; step 4e checks the list with the dynamic loader.
PY_VERSION=3.11
PY_DEBS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libpython3.11-dev
  libc6 libgcc-s1 libstdc++6 zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 libsqlite3-0
  libncursesw6 libtinfo6 libreadline8 libuuid1 libcrypt1 libnsl2 libtirpc3 libdb5.3
  libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1)
# the kleidi_sme2 suite, and xnnpack_like's Arm test (its eligible nodes on the selected Kleidi
# variants; the rest of xnnpack_like's suite asserts the x86 own path)
PY_TESTS=(tests/providers/kleidi_sme2 tests/providers/xnnpack_like/test_arm64_kleidi.py tests/test_mempattern.py)
PY_DESELECT=tests/providers/kleidi_sme2/test_kernels.py::test_native_kleidi_test_executable
PY_CONFIGS=${ARM64_PY_CONFIGS:-sme2-vl512 i8mm-nosme neon-a72}
HOST_PYTHON=${ARM64_HOST_PYTHON:-python3}
HELPER=$REPO/scripts/arm64_python.py
SYSROOT=$CACHE/sysroot
PYDIR=$CACHE/python

# name|qemu -cpu|expected variant|expected SVL in bytes (empty: no SME)
CONFIGS=(
  "sme2-vl128|max,sme-default-vector-length=16|sme2|16"
  "sme2-vl256|max,sme-default-vector-length=32|sme2|32"
  "sme2-vl512|max,sme-default-vector-length=64|sme2|64"
  "sme2-vl1024|max,sme-default-vector-length=128|sme2|128"
  "sme2-vl2048|max,sme-default-vector-length=256|sme2|256"
  "i8mm-nosme|max,sme=off|i8mm|"
  "neon-a72|cortex-a72|neon|"
)

log() { printf '[test-arm64] %s\n' "$*" >&2; }
die() {
  printf '[test-arm64] ERROR: %s\n' "$*" >&2
  exit 1
}
now_ns() { date +%s%N; }
elapsed() { # start_ns -> seconds with two decimals
  local d=$(($(now_ns) - $1))
  printf "%d.%02d" $((d / 1000000000)) $((d % 1000000000 / 10000000))
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

# --------------------------------------------------------------------------- 1. toolchain
ensure_toolchain() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "toolchain: ${PACKAGES[*]} already installed"
    return
  fi
  [ "$(id -u)" -eq 0 ] || die "missing packages ${missing[*]}: run as root (apt-get install)"
  log "toolchain: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# --------------------------------------------------------------------------- 2. qemu
qemu_major() { # path -> major version, or empty
  "$1" --version 2>/dev/null | sed -n 's/^qemu-aarch64 version \([0-9][0-9]*\)\..*/\1/p' | head -n1
}

# Prints a deb822 stanza for $QEMU_SUITE (component main) with the URIs and Signed-By of the
# machine's own entry for its Debian release (deb822 *.sources first, then a one-line
# /etc/apt/sources.list as a fallback). No host name is written anywhere but this derived copy.
derive_source_entry() {
  local codename file entry=""
  # shellcheck source=/dev/null
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || die "cannot tell the Debian release from /etc/os-release"
  for file in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    # Keep the raw URIs and Signed-By fields (continuation lines included: Signed-By may embed a
    # key block) of the first enabled "deb" stanza whose Suites include the release codename.
    entry=$(awk -v want="$codename" -v suite="$QEMU_SUITE" '
      function flush() {
        if (!done && enabled && (" " types " ") ~ / deb / && (" " suites " ") ~ (" " want " ") \
            && uris != "") {
          print "Types: deb"; printf "%s", uris
          print "Suites: " suite; print "Components: main"; printf "%s", signed
          done = 1
        }
        types = suites = uris = signed = field = ""; enabled = 1
      }
      BEGIN { enabled = 1 }
      /^#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ {
        if (field == "uris") uris = uris $0 "\n"; else if (field == "signed-by") signed = signed $0 "\n"
        next
      }
      {
        name = tolower(substr($0, 1, index($0, ":") - 1)); value = substr($0, index($0, ":") + 1)
        gsub(/^[ \t]+|[ \t]+$/, "", value); field = name
        if (name == "types") types = value
        else if (name == "suites") suites = value
        else if (name == "enabled") enabled = (tolower(value) != "no")
        else if (name == "uris") uris = $0 "\n"
        else if (name == "signed-by") signed = $0 "\n"
      }
      END { flush() }' "$file")
    [ -n "$entry" ] && break
  done
  if [ -z "$entry" ] && [ -f /etc/apt/sources.list ]; then
    # One-line format: deb [signed-by=FILE ...] URI SUITE COMPONENTS...
    entry=$(awk -v want="$codename" -v suite="$QEMU_SUITE" '
      $1 == "deb" {
        line = $0; signed = ""
        if (match(line, /\[[^]]*\]/)) {
          opts = substr(line, RSTART + 1, RLENGTH - 2); line = substr(line, 1, RSTART - 1) substr(line, RSTART + RLENGTH)
          n = split(opts, o, /[ \t]+/)
          for (i = 1; i <= n; i++) if (o[i] ~ /^signed-by=/) signed = substr(o[i], 11)
        }
        split(line, f, /[ \t]+/)
        if (f[3] == want) {
          print "Types: deb"; print "URIs: " f[2]; print "Suites: " suite
          print "Components: main"; if (signed != "") print "Signed-By: " signed
          exit
        }
      }' /etc/apt/sources.list)
  fi
  [ -n "$entry" ] || die "no Debian source entry for '$codename' in /etc/apt (debian.sources or sources.list)"
  printf '%s\n' "$entry"
}

ensure_qemu() {
  if [ -n "${ONNXPLEX_QEMU_AARCH64:-}" ]; then
    QEMU=$ONNXPLEX_QEMU_AARCH64
  else
    QEMU=$CACHE/qemu/qemu-aarch64
    local major
    major=$(qemu_major "$QEMU" || true)
    if [ -n "$major" ] && [ "$major" -ge "$QEMU_MIN_MAJOR" ]; then
      log "qemu: cached $QEMU"
    else
      fetch_qemu
    fi
  fi
  local major
  major=$(qemu_major "$QEMU" || true)
  [ -n "$major" ] || die "$QEMU does not run ('$QEMU --version' failed)"
  [ "$major" -ge "$QEMU_MIN_MAJOR" ] ||
    die "$QEMU is QEMU $major; SME2 emulation needs QEMU >= $QEMU_MIN_MAJOR"
  QEMU_VERSION=$("$QEMU" --version | head -n1)
  log "qemu: $QEMU_VERSION"
  export ONNXPLEX_QEMU_AARCH64=$QEMU
}

fetch_qemu() {
  [ "$(id -u)" -eq 0 ] || die "fetching qemu-user from $QEMU_SUITE uses apt-get: run as root"
  local apt=$CACHE/apt
  mkdir -p "$apt/etc/sources.list.d" "$apt/etc/preferences.d" "$apt/lists/partial" \
    "$apt/cache/archives/partial" "$apt/download" "$CACHE/qemu"
  derive_source_entry >"$apt/etc/sources.list.d/$QEMU_SUITE.sources"
  log "qemu: private apt source entry (derived from the machine's own):"
  sed 's/^/    /' "$apt/etc/sources.list.d/$QEMU_SUITE.sources" >&2
  # A private apt: its own source list, preferences, package lists and cache; the system's apt
  # state is neither read for sources nor changed.
  local opts=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d"
    -o "Dir::State::Lists=$apt/lists"
    -o "Dir::Cache=$apt/cache"
    -o "Dir::State::status=/dev/null"
    -o "APT::Sandbox::User=root"
  )
  local out
  if ! out=$(apt-get "${opts[@]}" update 2>&1); then
    printf '%s\n' "$out" >&2
    if printf '%s' "$out" | grep -qiE 'NO_PUBKEY|not signed|signature|EXPKEYSIG|KEYEXPIRED'; then
      # The machine's keyring lacks the key that signs $QEMU_SUITE. Debian ships the release keys in
      # debian-archive-keyring (bookworm's current one carries trixie's); take the newest from the
      # machine's own, already trusted, sources and retry.
      log "qemu: $QEMU_SUITE's signing key is not trusted here; upgrading debian-archive-keyring"
      DEBIAN_FRONTEND=noninteractive apt-get update -q
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --only-upgrade debian-archive-keyring
      out=$(apt-get "${opts[@]}" update 2>&1) || {
        printf '%s\n' "$out" >&2
        die "apt-get update for $QEMU_SUITE still fails after upgrading debian-archive-keyring"
      }
    else
      die "apt-get update for $QEMU_SUITE failed"
    fi
  fi
  rm -f "$apt/download"/qemu-user_*.deb
  (cd "$apt/download" && apt-get "${opts[@]}" download -t "$QEMU_SUITE" qemu-user) ||
    die "apt-get download -t $QEMU_SUITE qemu-user failed"
  local deb
  deb=$(ls "$apt/download"/qemu-user_*.deb)
  local tmp
  tmp=$(mktemp -d "$CACHE/qemu/extract.XXXXXX")
  dpkg-deb --fsys-tarfile "$deb" | tar -xf - -C "$tmp" ./usr/bin/qemu-aarch64
  mv -f "$tmp/usr/bin/qemu-aarch64" "$CACHE/qemu/qemu-aarch64"
  dpkg-deb -f "$deb" Version >"$CACHE/qemu/deb-version"
  rm -rf "$tmp" "$deb" # keep only the 17 MB static binary, not the 70 MB package
  log "qemu: extracted qemu-aarch64 from qemu-user $(cat "$CACHE/qemu/deb-version")"
}

# --------------------------------------------------------------------------- 3. build
check_elf() { # file: aarch64, and no SME ABI support routines
  aarch64-linux-gnu-readelf -h "$1" | grep -q 'Machine:.*AArch64' || die "$1 is not aarch64"
  local abi
  abi=$({ aarch64-linux-gnu-nm "$1"; aarch64-linux-gnu-nm -D "$1"; } 2>/dev/null |
    awk '{print $NF}' | grep -E "^($SME_ABI_ROUTINES)$" | sort -u || true)
  [ -z "$abi" ] || die "$1 refers to SME ABI support routines (${abi//$'\n'/ }): SME code must be \
self-contained (SMSTART/SMSTOP inside each kernel, no compiler-managed streaming or ZA state)"
}

source_dir_for() {
  if [ "$1" = arm_smoke ]; then
    echo "$REPO/tests/native/arm_smoke"
  else
    echo "${ARM64_SOURCE_DIR:-$REPO}"
  fi
}

project_args_for() { # the top-level project: no Python module, native tests on
  if [ "$1" != arm_smoke ] && [ -z "${ARM64_SOURCE_DIR:-}" ]; then
    echo "-DONNXPLEX_BUILD_PYTHON_MODULE=OFF -DONNXPLEX_BUILD_NATIVE_TESTS=ON"
  fi
}

build_target() { # target -> sets EXE
  local target=$1 src build start
  src=$(source_dir_for "$target")
  [ -f "$src/CMakeLists.txt" ] ||
    die "target '$target': no CMake project at $src (set ARM64_SOURCE_DIR)"
  build=$CACHE/build/$target
  start=$(now_ns)
  log "build: $target from ${src#"$REPO"/} in ${build#"$REPO"/}"
  # shellcheck disable=SC2046,SC2086  # both are word lists on purpose
  cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN_FILE" \
    -DCMAKE_BUILD_TYPE=Release \
    -DONNXPLEX_WERROR=ON \
    $(project_args_for "$target") ${ARM64_CMAKE_ARGS:-} >"$CACHE/logs/$target.configure.log" 2>&1 || {
    cat "$CACHE/logs/$target.configure.log" >&2
    die "target '$target': CMake configure failed"
  }
  grep -E '^-- (arm_smoke|kleidi|onnxplex)' "$CACHE/logs/$target.configure.log" >&2 || true
  cmake --build "$build" --target "$target" -j "$JOBS" >"$CACHE/logs/$target.build.log" 2>&1 || {
    cat "$CACHE/logs/$target.build.log" >&2
    die "target '$target': build failed"
  }
  EXE=$(find "$build" -type f -name "$target" -perm -u+x -not -path '*/CMakeFiles/*' | head -n1)
  [ -n "$EXE" ] || die "target '$target': built, but no executable named $target in $build"
  check_elf "$EXE"
  log "build: $target done in $(elapsed "$start") s: ${EXE#"$REPO"/}"
}

# --------------------------------------------------------------------------- 4. python target
need_root() { [ "$(id -u)" -eq 0 ] || die "$1 needs root"; }

ensure_sysroot() { # 4a
  local stamp=$SYSROOT/.onnxplex-packages want
  want=$(printf '%s\n' "${PY_DEBS[@]}" | sort)
  if [ -f "$stamp" ] && [ "$(cut -d' ' -f1 "$stamp")" = "$want" ]; then
    log "sysroot: cached ${SYSROOT#"$REPO"/} ($(grep '^python' "$stamp"))"
    return
  fi
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    need_root "dpkg --add-architecture arm64"
    log "sysroot: dpkg --add-architecture arm64"
    dpkg --add-architecture arm64
  fi
  if ! apt-cache show "python$PY_VERSION-minimal:arm64" >/dev/null 2>&1; then
    need_root "apt-get update (for the arm64 package lists)"
    log "sysroot: apt-get update (arm64 package lists of the machine's own sources)"
    apt-get update -q >"$CACHE/logs/sysroot.apt.log" 2>&1 || {
      cat "$CACHE/logs/sysroot.apt.log" >&2
      die "apt-get update failed"
    }
  fi
  local debs=$PYDIR/debs deb
  rm -rf "$debs" "$SYSROOT"
  mkdir -p "$debs" "$SYSROOT"
  log "sysroot: apt-get download ${#PY_DEBS[@]} arm64 packages"
  (cd "$debs" && apt-get -o APT::Sandbox::User=root download "${PY_DEBS[@]/%/:arm64}") \
    >>"$CACHE/logs/sysroot.apt.log" 2>&1 || {
    tail -n 20 "$CACHE/logs/sysroot.apt.log" >&2
    die "apt-get download of the arm64 packages failed"
  }
  for deb in "$debs"/*.deb; do
    dpkg-deb -x "$deb" "$SYSROOT"
    printf '%s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)"
  done | sort >"$stamp.new"
  [ -x "$SYSROOT/usr/bin/python$PY_VERSION" ] || die "no usr/bin/python$PY_VERSION in the sysroot"
  mv "$stamp.new" "$stamp"
  rm -rf "$debs"
  log "sysroot: ${SYSROOT#"$REPO"/} ($(du -sh "$SYSROOT" | cut -f1); $(grep '^python' "$stamp"))"
}

ensure_site() { # 4b
  local reqs glibc key plats=(--platform manylinux2014_aarch64) v
  reqs=$("$HOST_PYTHON" "$HELPER" requirements "$REPO/pyproject.toml")
  "$HOST_PYTHON" "$HELPER" constraints >"$PYDIR/constraints.txt"
  # manylinux_2_X runs where glibc >= 2.X; pip does not widen explicit --platform tags itself.
  glibc=$(sed -n 's/^libc6 2\.\([0-9][0-9]*\).*/\1/p' "$SYSROOT/.onnxplex-packages")
  [ -n "$glibc" ] || die "cannot tell the sysroot's glibc version"
  for ((v = 17; v <= glibc; v++)); do plats+=(--platform "manylinux_2_${v}_aarch64"); done
  key=$({ printf '%s\n' "$reqs" "${plats[*]}" "$PY_VERSION"; cat "$PYDIR/constraints.txt"; } |
    sha256sum | cut -c1-16)
  if [ -d "$PYDIR/site" ] && [ "$(cat "$PYDIR/site.key" 2>/dev/null)" = "$key" ]; then
    log "site: cached ${PYDIR#"$REPO"/}/site ($(wc -l <"$PYDIR/site.wheels") wheels)"
    return
  fi
  local reqv=() args
  mapfile -t reqv <<<"$reqs"
  args=(download --only-binary=:all: "${plats[@]}" --python-version "$PY_VERSION"
    --implementation cp --abi "cp${PY_VERSION/./}" -d "$PYDIR/wheels")
  rm -rf "$PYDIR/wheels" "$PYDIR/site.key"
  log "site: pip download (aarch64, cp${PY_VERSION/./}) ${reqv[*]}"
  if ! "$HOST_PYTHON" -m pip "${args[@]}" -c "$PYDIR/constraints.txt" "${reqv[@]}" \
    >"$CACHE/logs/site.pip.log" 2>&1; then
    log "site: not every host version has an aarch64 wheel; resolving without the host's pins"
    rm -rf "$PYDIR/wheels"
    "$HOST_PYTHON" -m pip "${args[@]}" "${reqv[@]}" >>"$CACHE/logs/site.pip.log" 2>&1 || {
      tail -n 30 "$CACHE/logs/site.pip.log" >&2
      die "pip download of the aarch64 wheels failed"
    }
  fi
  "$HOST_PYTHON" "$HELPER" unpack-wheels "$PYDIR/wheels" "$PYDIR/site" >"$PYDIR/site.wheels"
  rm -rf "$PYDIR/wheels"
  echo "$key" >"$PYDIR/site.key"
  log "site: $(paste -sd' ' "$PYDIR/site.wheels")"
}

pybind11_cmake_dir() { # the host's pybind11, else the pyproject's pinned one from PyPI
  local dir tools=$PYDIR/host-pybind11 spec
  if dir=$("$HOST_PYTHON" -m pybind11 --cmakedir 2>/dev/null) && [ -d "$dir" ]; then
    echo "$dir"
    return
  fi
  if [ ! -d "$tools/site/pybind11" ]; then
    spec=$("$HOST_PYTHON" "$HELPER" build-requirement pybind11 "$REPO/pyproject.toml")
    log "build: no pybind11 in $HOST_PYTHON; pip download '$spec' (header-only, no install)"
    rm -rf "$tools"
    "$HOST_PYTHON" -m pip download --no-deps --only-binary=:all: -d "$tools/wheels" "$spec" \
      >"$CACHE/logs/pybind11.pip.log" 2>&1 || {
      cat "$CACHE/logs/pybind11.pip.log" >&2
      die "pip download $spec failed"
    }
    "$HOST_PYTHON" "$HELPER" unpack-wheels "$tools/wheels" "$tools/site" >/dev/null
  fi
  PYTHONPATH=$tools/site "$HOST_PYTHON" -m pybind11 --cmakedir
}

build_python_module() { # 4c -> sets MODULE
  local build=$CACHE/build/python-module inc=$PYDIR/include ext pybind11_dir start
  start=$(now_ns)
  ext=$("$HOST_PYTHON" "$HELPER" ext-suffix "$SYSROOT")
  pybind11_dir=$(pybind11_cmake_dir)
  # Debian's python3.11/pyconfig.h only includes <aarch64-linux-gnu/python3.11/pyconfig.h>; one
  # include folder with that file in its place needs no extra include path. Times are kept, so
  # a rebuild of the folder does not rebuild the module.
  rm -rf "$inc"
  mkdir -p "$inc"
  cp -a "$SYSROOT/usr/include/python$PY_VERSION" "$inc/"
  cp -p "$SYSROOT/usr/include/aarch64-linux-gnu/python$PY_VERSION/pyconfig.h" \
    "$inc/python$PY_VERSION/pyconfig.h"
  log "build: _kleidi$ext in ${build#"$REPO"/} (pybind11 from ${pybind11_dir%/share/cmake/*})"
  # A shared module: ONNXPLEX_ARM64_STATIC=OFF (see the toolchain file). FindPython takes the
  # host's interpreter (same 3.11) but the sysroot's headers; pybind11 is told the suffix
  # instead of asking the host interpreter.
  cmake -S "$REPO" -B "$build" -G Ninja \
    -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN_FILE" -DONNXPLEX_ARM64_STATIC=OFF \
    -DCMAKE_BUILD_TYPE=Release -DONNXPLEX_WERROR=ON \
    -DONNXPLEX_BUILD_PYTHON_MODULE=ON -DONNXPLEX_BUILD_NATIVE_TESTS=OFF \
    -DPython_EXECUTABLE="$(command -v "$HOST_PYTHON")" \
    -DPython_INCLUDE_DIR="$inc/python$PY_VERSION" \
    -Dpybind11_DIR="$pybind11_dir" \
    -DPYTHON_MODULE_EXTENSION="$ext" -DPYTHON_MODULE_DEBUG_POSTFIX= -DPYTHON_IS_DEBUG=OFF \
    >"$CACHE/logs/python-module.configure.log" 2>&1 || {
    cat "$CACHE/logs/python-module.configure.log" >&2
    die "_kleidi: CMake configure failed"
  }
  grep -E '^-- (kleidi|Found Python|Found pybind11)' "$CACHE/logs/python-module.configure.log" >&2 || true
  cmake --build "$build" --target _kleidi -j "$JOBS" >"$CACHE/logs/python-module.build.log" 2>&1 || {
    cat "$CACHE/logs/python-module.build.log" >&2
    die "_kleidi: build failed"
  }
  MODULE=$(find "$build" -type f -name "_kleidi$ext" -not -path '*/CMakeFiles/*' | head -n1)
  [ -n "$MODULE" ] || die "_kleidi: built, but no _kleidi$ext in $build"
  check_elf "$MODULE"
  log "build: _kleidi done in $(elapsed "$start") s: ${MODULE#"$REPO"/}"
  # cpu_mlas's native module: compiled and linked for aarch64 (a build check: its non-x86
  # paths are otherwise never compiled here), not installed
  start=$(now_ns)
  cmake --build "$build" --target _mlas_native -j "$JOBS" >"$CACHE/logs/mlas-native.build.log" 2>&1 || {
    cat "$CACHE/logs/mlas-native.build.log" >&2
    die "_mlas_native: aarch64 build failed"
  }
  local mlas
  mlas=$(find "$build" -type f -name "_mlas_native$ext" -not -path '*/CMakeFiles/*' | head -n1)
  [ -n "$mlas" ] || die "_mlas_native: built, but no _mlas_native$ext in $build"
  check_elf "$mlas"
  log "build: _mlas_native (build check) done in $(elapsed "$start") s"
  # the core's native modules, installed beside onnxplex: the executor's C loop (every
  # session the tests run goes through it) and the memory patterns (tests/test_mempattern.py)
  CORE_MODULES=()
  local core_target so
  for core_target in _runloop _mempattern; do
    cmake --build "$build" --target "$core_target" -j "$JOBS" \
      >"$CACHE/logs/$core_target.build.log" 2>&1 || {
      cat "$CACHE/logs/$core_target.build.log" >&2
      die "$core_target: aarch64 build failed"
    }
    # (CMake's Python_add_library names it <target>.so here: no SOABI from the host's
    # interpreter when cross-compiling; CPython imports that name too)
    so=$(find "$build" -type f -name "$core_target*.so" -not -path '*/CMakeFiles/*' | head -n1)
    [ -n "$so" ] || die "$core_target: built, but no $core_target*.so in $build"
    check_elf "$so"
    CORE_MODULES+=("$so")
  done
}

check_loader() { # 4e: every aarch64 .so resolves its libraries in the sysroot
  local ld=$SYSROOT/lib/ld-linux-aarch64.so.1 f out unresolved="" n=0
  [ -f "$ld" ] || die "no lib/ld-linux-aarch64.so.1 in the sysroot"
  while IFS= read -r -d '' f; do
    n=$((n + 1))
    out=$("$QEMU" -L "$SYSROOT" "$ld" --list "$f" 2>&1) || true
    if grep -q 'not found' <<<"$out"; then
      unresolved+="  ${f#"$CACHE"/}: $(grep 'not found' <<<"$out" | sed 's/^[[:space:]]*//' | paste -sd' ')"$'\n'
    fi
  done < <(find "$SYSROOT/usr/lib/python$PY_VERSION/lib-dynload" "$PYDIR/site" "$PYDIR/install" \
    -type f \( -name '*.so' -o -name '*.so.*' \) -print0)
  [ -z "$unresolved" ] || die "libraries missing from the sysroot (add their packages to PY_DEBS):
$unresolved"
  log "python: the sysroot's dynamic loader resolves all $n aarch64 shared objects"
}

prepare_python() { # 4a-f -> sets PY_CASE_DIR
  local start
  start=$(now_ns)
  mkdir -p "$PYDIR"
  ensure_sysroot
  ensure_site
  build_python_module
  "$HOST_PYTHON" "$HELPER" install-tree "$REPO" "$MODULE" "$PYDIR/install" "${CORE_MODULES[@]}" >/dev/null
  log "python: install tree ${PYDIR#"$REPO"/}/install (onnxplex + dist-info with entry points)"
  check_loader
  if [ "$("$HOST_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$PY_VERSION" ]; then
    # Compiling under QEMU costs each cold run ~10 s per config; the host writes the same .pyc.
    PYTHONPYCACHEPREFIX=$PYDIR/pycache "$HOST_PYTHON" -m compileall -q -j 0 \
      "$SYSROOT/usr/lib/python$PY_VERSION" "$PYDIR/site" "$PYDIR/install" \
      >"$CACHE/logs/python.compileall.log" 2>&1 || true
  fi
  PY_CASE_DIR=
  local case_script=$REPO/tests/providers/kleidi_sme2/arm64_models.py
  if [ -f "$case_script" ]; then
    if "$HOST_PYTHON" -c 'import onnxruntime, onnxplex.providers.kleidi_sme2._kleidi' 2>/dev/null; then
      rm -rf "$PYDIR/x86-case"
      "$HOST_PYTHON" "$case_script" "$PYDIR/x86-case" >"$CACHE/logs/python.x86-case.log" 2>&1 || {
        cat "$CACHE/logs/python.x86-case.log" >&2
        die "writing the x86 case of ${case_script#"$REPO"/} failed"
      }
      PY_CASE_DIR=$PYDIR/x86-case
      log "python: x86 case for ${case_script#"$REPO"/} in ${PY_CASE_DIR#"$REPO"/}"
    else
      log "python: $HOST_PYTHON cannot import onnxruntime and onnxplex's _kleidi: no x86 case;" \
        "test_arm64_models.py's test_matches_the_x86_run will be skipped"
    fi
  fi
  log "python: ready in $(elapsed "$start") s"
}

# --------------------------------------------------------------------------- 5. run
run_logged() { # log command... -> writes <log>, <log>.rc, <log>.time
  set +e
  local logf=$1 start rc
  shift
  start=$(now_ns)
  echo "\$ $*" >"$logf"
  timeout --kill-after=10 "$TIMEOUT" "$@" </dev/null >>"$logf" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] || echo "TIMEOUT: no result after ${TIMEOUT} s" >>"$logf"
  echo "$rc" >"$logf.rc"
  elapsed "$start" >"$logf.time"
}

run_native() { # target exe config
  local target=$1 exe=$2 name cpu variant svl
  IFS='|' read -r name cpu variant svl <<<"$3"
  local args=(--expect-variant "$variant")
  if [ "$target" = arm_smoke ] && [ -n "$svl" ]; then args+=(--expect-svl "$svl"); fi
  # shellcheck disable=SC2206  # ARM64_TEST_ARGS is a word list on purpose
  args+=(${ARM64_TEST_ARGS:-})
  run_logged "$CACHE/logs/$target.$name.log" "$QEMU" -cpu "$cpu" "$exe" "${args[@]}"
}

run_python() { # config: pytest under the emulated python, from the repository (its pyproject)
  local name cpu variant svl
  IFS='|' read -r name cpu variant svl <<<"$1"
  mkdir -p "$PYDIR/home" "$PYDIR/tmp"   # (pytest makes --basetemp, not its parents)
  # A clean environment: nothing from the host's Python or Kleidi settings leaks in.
  local env=(PATH=/usr/bin:/bin HOME="$PYDIR/home" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}"
    PYTHONHOME="$SYSROOT/usr" PYTHONPATH="$PYDIR/install:$PYDIR/site" PYTHONNOUSERSITE=1
    PYTHONPYCACHEPREFIX="$PYDIR/pycache" OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
    ONNXPLEX_KLEIDI_EXPECT="$variant")
  if [ -n "$PY_CASE_DIR" ]; then env+=(ONNXPLEX_ARM64_CASE_DIR="$PY_CASE_DIR"); fi
  cd "$REPO" || return
  # shellcheck disable=SC2086  # ARM64_PYTEST_ARGS is a word list on purpose
  run_logged "$CACHE/logs/python.$name.log" env -i "${env[@]}" \
    "$QEMU" -L "$SYSROOT" -cpu "$cpu" "$SYSROOT/usr/bin/python$PY_VERSION" -m pytest \
    -p no:cacheprovider --basetemp="$PYDIR/tmp/$name" --deselect "$PY_DESELECT" \
    ${ARM64_PYTEST_ARGS:-} "${PY_TESTS[@]}"
}

pytest_summary() { # log -> pytest's last line ("N passed, M skipped ... in T s"), no ='s
  grep -E '(passed|failed|skipped|deselected|error|no tests ran).* in [0-9.]+s' "$1" |
    tail -n1 | sed -E 's/^=+ //; s/ =+$//'
}

select_configs() { # "name ..." -> SELECTED: the matching CONFIGS entries
  local want c found
  SELECTED=()
  for want in $1; do
    found=
    for c in "${CONFIGS[@]}"; do
      if [ "${c%%|*}" = "$want" ]; then SELECTED+=("$c"); found=1; fi
    done
    [ -n "$found" ] || die "unknown configuration '$want' (ARM64_CONFIGS / ARM64_PY_CONFIGS)"
  done
}

main() {
  local targets=()
  while [ $# -gt 0 ]; do
    case $1 in
      -h | --help) usage; exit 0 ;;
      -*) die "unknown option $1 (see --help)" ;;
      *) targets+=("$1") ;;
    esac
    shift
  done
  if [ ${#targets[@]} -eq 0 ]; then
    targets=(arm_smoke)
    if [ -f "$REPO/tests/native/kleidi_test.cpp" ] && grep -q kleidi_test "$REPO/CMakeLists.txt"; then
      targets+=(kleidi_test)
    fi
  fi
  local configs=("${CONFIGS[@]}") py_configs=()
  if [ -n "${ARM64_CONFIGS:-}" ]; then
    select_configs "$ARM64_CONFIGS"
    configs=("${SELECTED[@]}")
  fi
  select_configs "$PY_CONFIGS"
  py_configs=("${SELECTED[@]}")

  local t0
  t0=$(now_ns)
  mkdir -p "$CACHE/logs"
  ensure_toolchain
  ensure_qemu

  # Runs as "target|config", the python ones first: they take longest.
  declare -A exes
  local target c runs=()
  for target in "${targets[@]}"; do
    if [ "$target" = python ]; then
      prepare_python
      local py_runs=()
      for c in "${py_configs[@]}"; do py_runs+=("python|$c"); done
      runs=("${py_runs[@]}" "${runs[@]}")
    else
      build_target "$target"
      exes[$target]=$EXE
      for c in "${configs[@]}"; do runs+=("$target|$c"); done
    fi
  done

  log "run: ${#runs[@]} run(s) of ${#targets[@]} target(s), $JOBS at a time"
  local run name
  for run in "${runs[@]}"; do
    target=${run%%|*} c=${run#*|} name=${c%%|*}
    rm -f "$CACHE/logs/$target.$name.log"*
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    if [ "$target" = python ]; then
      run_python "$c" &
    else
      run_native "$target" "${exes[$target]}" "$c" &
    fi
  done
  wait || true

  local passed=0 failed=0 cpu variant svl logf rc extra
  for run in "${runs[@]}"; do
    target=${run%%|*}
    IFS='|' read -r name cpu variant svl <<<"${run#*|}"
    logf=$CACHE/logs/$target.$name.log
    rc=$(cat "$logf.rc" 2>/dev/null || echo missing)
    extra=
    if [ "$target" = python ]; then extra="  $(pytest_summary "$logf")"; fi
    if [ "$rc" = 0 ]; then
      passed=$((passed + 1))
      printf 'PASS %-12s %-12s -cpu %-38s %6s s%s\n' "$target" "$name" "$cpu" "$(cat "$logf.time")" \
        "$extra"
    else
      failed=$((failed + 1))
      printf 'FAIL %-12s %-12s -cpu %-38s %6s s  exit %s%s\n' "$target" "$name" "$cpu" \
        "$(cat "$logf.time" 2>/dev/null || echo '?')" "$rc" "$extra"
      printf '%s\n' "------ $logf (last 80 lines) ------"
      tail -n 80 "$logf" 2>/dev/null | sed "s/^/  | /" || echo "(no log)"
      printf '%s\n' "------"
    fi
  done
  log "$QEMU_VERSION; total $(elapsed "$t0") s; logs in ${CACHE#"$REPO"/}/logs"
  echo "arm64: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || {
    echo "test-arm64: FAILED ($failed of $((passed + failed)) emulated runs)" >&2
    exit 1
  }
}

main "$@"
