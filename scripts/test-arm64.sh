#!/usr/bin/env bash
# Arm test suite under emulation: cross-compile a native C++ test executable for aarch64 and run it
# under QEMU user-mode emulation on every CPU the Kleidi kernels must handle.
#
#   scripts/test-arm64.sh [target ...]
#
# Targets: `arm_smoke` (its own CMake project, tests/native/arm_smoke: always available) and any
# executable target of the CMake project in $ARM64_SOURCE_DIR (default: the repository's top-level
# project, configured with -DONNXPLEX_BUILD_PYTHON_MODULE=OFF -DONNXPLEX_BUILD_NATIVE_TESTS=ON),
# e.g. `kleidi_test`. With no target: arm_smoke, plus kleidi_test once tests/native/kleidi_test.cpp
# exists and the top-level CMakeLists.txt builds it.
#
# CPU configurations (each run gets --expect-variant; arm_smoke also gets --expect-svl):
#   sme2-vl128 .. sme2-vl2048   -cpu max,sme-default-vector-length=16|32|64|128|256 (bytes)  sme2
#   i8mm-nosme                  -cpu max,sme=off                                              i8mm
#   neon-a72                    -cpu cortex-a72                                               neon
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
#   3. Configures and builds each target with CMake and scripts/aarch64-clang19.cmake (static
#      executables), and refuses a binary that contains the SME ABI support routines.
#   4. Runs each target under each CPU configuration (in parallel, $ARM64_JOBS at a time) and
#      fails loudly - printing the run's log - if any run fails or times out.
# Exit status: 0 when every run passed; nonzero otherwise.
#
# Environment:
#   ARM64_CACHE        cache folder (default: <repo>/.cache/arm64, git-ignored)
#   ARM64_SOURCE_DIR   CMake project holding targets other than arm_smoke (default: the repo)
#   ARM64_CMAKE_ARGS   extra arguments for the CMake configure step (word-split)
#   ARM64_TEST_ARGS    extra arguments for every test run (word-split)
#   ARM64_CONFIGS      space-separated subset of the configuration names above
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
  aarch64-linux-gnu-readelf -h "$EXE" | grep -q 'Machine:.*AArch64' ||
    die "$EXE is not an aarch64 executable"
  local abi
  abi=$(aarch64-linux-gnu-nm "$EXE" 2>/dev/null | awk '{print $NF}' | grep -E "^($SME_ABI_ROUTINES)$" || true)
  [ -z "$abi" ] || die "$EXE contains SME ABI support routines (${abi//$'\n'/ }): SME code must be \
self-contained (SMSTART/SMSTOP inside each kernel, no compiler-managed streaming or ZA state)"
  log "build: $target done in $(elapsed "$start") s: ${EXE#"$REPO"/}"
}

# --------------------------------------------------------------------------- 4. run
run_one() { # target exe config -> writes <log>, <log>.rc, <log>.time
  set +e
  local target=$1 exe=$2 name cpu variant svl
  IFS='|' read -r name cpu variant svl <<<"$3"
  local logf=$CACHE/logs/$target.$name.log args=(--expect-variant "$variant")
  if [ "$target" = arm_smoke ] && [ -n "$svl" ]; then args+=(--expect-svl "$svl"); fi
  # shellcheck disable=SC2206  # ARM64_TEST_ARGS is a word list on purpose
  args+=(${ARM64_TEST_ARGS:-})
  local start rc
  start=$(now_ns)
  echo "\$ $QEMU -cpu $cpu $exe ${args[*]}" >"$logf"
  timeout --kill-after=10 "$TIMEOUT" "$QEMU" -cpu "$cpu" "$exe" "${args[@]}" </dev/null >>"$logf" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] || echo "TIMEOUT: no result after ${TIMEOUT} s" >>"$logf"
  echo "$rc" >"$logf.rc"
  elapsed "$start" >"$logf.time"
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
  local configs=("${CONFIGS[@]}")
  if [ -n "${ARM64_CONFIGS:-}" ]; then
    configs=()
    local c want found
    for want in $ARM64_CONFIGS; do
      found=
      for c in "${CONFIGS[@]}"; do [ "${c%%|*}" = "$want" ] && configs+=("$c") && found=1; done
      [ -n "$found" ] || die "unknown configuration '$want' in ARM64_CONFIGS"
    done
  fi

  local t0
  t0=$(now_ns)
  mkdir -p "$CACHE/logs"
  ensure_toolchain
  ensure_qemu

  declare -A exes
  local target
  for target in "${targets[@]}"; do
    build_target "$target"
    exes[$target]=$EXE
  done

  log "run: ${#targets[@]} target(s) x ${#configs[@]} CPU configuration(s), $JOBS at a time"
  local c
  for target in "${targets[@]}"; do
    for c in "${configs[@]}"; do
      rm -f "$CACHE/logs/$target.${c%%|*}.log"*
      while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
      run_one "$target" "${exes[$target]}" "$c" &
    done
  done
  wait || true

  local passed=0 failed=0 name cpu variant svl logf rc
  for target in "${targets[@]}"; do
    for c in "${configs[@]}"; do
      IFS='|' read -r name cpu variant svl <<<"$c"
      logf=$CACHE/logs/$target.$name.log
      rc=$(cat "$logf.rc" 2>/dev/null || echo missing)
      if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        printf 'PASS %-12s %-12s -cpu %-38s %6s s\n' "$target" "$name" "$cpu" "$(cat "$logf.time")"
      else
        failed=$((failed + 1))
        printf 'FAIL %-12s %-12s -cpu %-38s %6s s  exit %s\n' "$target" "$name" "$cpu" \
          "$(cat "$logf.time" 2>/dev/null || echo '?')" "$rc"
        printf '%s\n' "------ $logf (last 60 lines) ------"
        tail -n 60 "$logf" 2>/dev/null | sed "s/^/  | /" || echo "(no log)"
        printf '%s\n' "------"
      fi
    done
  done
  log "$QEMU_VERSION; total $(elapsed "$t0") s; logs in ${CACHE#"$REPO"/}/logs"
  echo "arm64: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] || {
    echo "test-arm64: FAILED ($failed of $((passed + failed)) emulated runs)" >&2
    exit 1
  }
}

main "$@"
