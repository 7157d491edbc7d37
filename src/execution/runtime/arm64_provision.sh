#!/usr/bin/env bash
# provision.sh CACHE_DIR
#
# Fetch, without changing the system, everything needed to run the official
# ONNX Runtime aarch64 wheel under qemu user-mode emulation on x86-64 Linux:
#   CACHE_DIR/qemu/qemu-aarch64      static qemu-user (Debian package, extracted)
#   CACHE_DIR/sysroot/               Debian bookworm arm64 libc + python3.11 (extracted .debs)
#   CACHE_DIR/site/                  aarch64 wheels unpacked (numpy, onnxruntime, ...)
#   CACHE_DIR/manifest.txt           exact versions + sha256 of what was fetched (written last)
#
# No apt-get install, no dpkg --add-architecture, no host `apt-get update`:
# apt-get runs with a private APT_CONFIG (its own sources, lists, cache, no host
# apt.conf.d hooks) and only `update` + `download`. Needs on the host: bash,
# apt-get, dpkg-deb, gpgv + /usr/share/keyrings/debian-archive-keyring.gpg
# (all in a Debian base system), python3 with pip, network to
# deb.debian.org and PyPI. Idempotent: each step is skipped when its stamp
# (which encodes the pinned versions) matches; delete CACHE_DIR/*.stamp to redo.
#
# Environment: REFRESH=1 re-runs apt update and re-downloads what changed;
# KEEP_APT=1 keeps the private apt lists. Overridable pins:
set -euo pipefail

CACHE=${1:?usage: provision.sh CACHE_DIR}
ORT_VERSION=${ORT_VERSION:-1.31.1}
NUMPY_VERSION=${NUMPY_VERSION:-2.4.6}          # = x86 venv (pip freeze)
EXTRA_WHEELS=${EXTRA_WHEELS:-"flatbuffers==25.12.19 packaging==26.4 protobuf==7.36.2"}
# qemu >= 8.x emulates /proc/cpuinfo for aarch64 guests (7.2 does not -> ORT segfaults)
QEMU_SUITES=${QEMU_SUITES:-"trixie bookworm-backports"}   # first suite that has qemu-user wins
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
KEYRING=${KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
SYSROOT_PKGS=${SYSROOT_PKGS:-"libc6 libgcc-s1 libstdc++6 zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 python3.11-minimal libpython3.11-minimal libpython3.11-stdlib"}
PY=${PYTHON:-python3}

mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
log() { printf '[provision] %s\n' "$*" >&2; }
stamp_ok() { [ -f "$CACHE/$1.stamp" ] && [ "$(cat "$CACHE/$1.stamp")" = "$2" ]; }
stamp_set() { printf '%s' "$2" > "$CACHE/$1.stamp"; }

for t in apt-get dpkg-deb gpgv tar; do command -v $t >/dev/null || { echo "missing host tool: $t" >&2; exit 2; }; done
[ -r "$KEYRING" ] || { echo "missing $KEYRING (debian-archive-keyring)" >&2; exit 2; }

# --- private apt ------------------------------------------------------------
# $1 = name, $2 = arch, stdin = sources.list lines
apt_setup() {
  local d="$CACHE/apt-$1" arch=$2
  mkdir -p "$d"/etc/{apt.conf.d,preferences.d,sources.list.d,trusted.gpg.d} \
           "$d"/state/lists/partial "$d"/cache/archives/partial "$d"/log
  : > "$d/state/status"
  cat > "$d/etc/sources.list"
  cat > "$d/apt.conf" <<EOF
Dir::State "$d/state";
Dir::State::status "$d/state/status";
Dir::Cache "$d/cache";
Dir::Log "$d/log";
Dir::Etc "$d/etc";
Dir::Etc::sourcelist "sources.list";
Dir::Etc::sourceparts "sources.list.d";
Dir::Etc::parts "apt.conf.d";
Dir::Etc::preferences "preferences";
Dir::Etc::preferencesparts "preferences.d";
Dir::Etc::trustedparts "trusted.gpg.d";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Sandbox::User "$(id -un)";
Acquire::Languages "none";
Acquire::Retries "3";
EOF
}
apt_p() { local n=$1; shift; APT_CONFIG="$CACHE/apt-$n/apt.conf" apt-get -q "$@"; }
apt_c() { local n=$1; shift; APT_CONFIG="$CACHE/apt-$n/apt.conf" apt-cache "$@"; }
# download into $2 and print the .deb path (apt names it pkg_ver_arch.deb, ':' -> %3a)
apt_download() {
  local n=$1 dir=$2; shift 2
  (cd "$dir" && apt_p "$n" download "$@" >&2)
}

# --- 1. qemu-aarch64 (static) ----------------------------------------------
step_qemu() {
  apt_setup amd64 amd64 <<EOF
deb [arch=amd64 signed-by=$KEYRING] $DEBIAN_MIRROR trixie main
deb [arch=amd64 signed-by=$KEYRING] $DEBIAN_MIRROR bookworm-backports main
EOF
  apt_p amd64 update >&2
  local suite ver=""
  for suite in $QEMU_SUITES; do
    ver=$(apt_c amd64 policy qemu-user | awk -v s="$suite/main" '
      NF==2 && $2 ~ /^[0-9]+$/ {v=$1} NF==3 && $1=="***" {v=$2}
      index($0, " "s" ") {print v; exit}')
    [ -n "$ver" ] && break
  done
  [ -n "$ver" ] || { echo "qemu-user not found in: $QEMU_SUITES" >&2; exit 1; }
  local key="qemu-user=$ver"
  if stamp_ok qemu "$key" && [ -x "$CACHE/qemu/qemu-aarch64" ]; then log "qemu $ver: cached"; return; fi
  log "qemu: downloading qemu-user $ver ($suite)"
  local tmp; tmp=$(mktemp -d "$CACHE/.qemu.XXXX")
  apt_download amd64 "$tmp" "qemu-user=$ver"
  local deb; deb=$(ls "$tmp"/qemu-user_*.deb)
  # Since Debian qemu 1:8.x qemu-user's binaries are static; qemu-user-static is a
  # transitional package. 7.2 (bookworm) named it qemu-aarch64-static.
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" ./usr/bin/qemu-aarch64
  "$tmp/usr/bin/qemu-aarch64" --version | head -1 >&2
  sha=$(sha256sum "$deb" | cut -d' ' -f1)
  rm -rf "$CACHE/qemu"; mkdir -p "$CACHE/qemu"
  mv "$tmp/usr/bin/qemu-aarch64" "$CACHE/qemu/qemu-aarch64"
  echo "qemu-user $ver $suite amd64 deb-sha256=$sha" > "$CACHE/qemu/VERSION"
  rm -rf "$tmp"
  stamp_set qemu "$key"
}

# --- 2. arm64 sysroot ---------------------------------------------------------
step_sysroot() {
  apt_setup arm64 arm64 <<EOF
deb [arch=arm64 signed-by=$KEYRING] $DEBIAN_MIRROR bookworm main
deb [arch=arm64 signed-by=$KEYRING] $DEBIAN_MIRROR bookworm-updates main
deb [arch=arm64 signed-by=$KEYRING] $SECURITY_MIRROR bookworm-security main
EOF
  apt_p arm64 update >&2
  local p v key=""
  for p in $SYSROOT_PKGS; do
    v=$(apt_c arm64 policy "$p" | awk '/Candidate:/{print $2}')
    [ -n "$v" ] && [ "$v" != "(none)" ] || { echo "arm64 package $p not found" >&2; exit 1; }
    key="$key $p=$v"
  done
  key=${key# }
  if stamp_ok sysroot "$key" && [ -x "$CACHE/sysroot/usr/bin/python3.11" ]; then log "sysroot: cached"; return; fi
  log "sysroot: downloading $key"
  local tmp; tmp=$(mktemp -d "$CACHE/.sysroot.XXXX")
  mkdir -p "$tmp/debs" "$tmp/root"
  # shellcheck disable=SC2086
  apt_download arm64 "$tmp/debs" $key
  for f in "$tmp"/debs/*.deb; do dpkg-deb -x "$f" "$tmp/root"; done
  rm -rf "$tmp"/root/usr/share/{doc,man,locale,lintian}
  (cd "$tmp/debs" && sha256sum *.deb) > "$tmp/root/DEBS.sha256"
  du -cb "$tmp"/debs/*.deb | tail -1 | sed 's/total/bytes downloaded (debs)/' >&2
  rm -rf "$CACHE/sysroot" && mv "$tmp/root" "$CACHE/sysroot" && rm -rf "$tmp"
  stamp_set sysroot "$key"
  rm -f "$CACHE/site.stamp"   # force re-precompile against the new interpreter
}

# --- 3. aarch64 wheels ------------------------------------------------------
step_site() {
  local key="onnxruntime==$ORT_VERSION numpy==$NUMPY_VERSION $EXTRA_WHEELS"
  if stamp_ok site "$key" && [ -d "$CACHE/site/onnxruntime" ]; then log "site: cached"; return; fi
  log "site: pip download $key"
  local tmp; tmp=$(mktemp -d "$CACHE/.site.XXXX")
  # --no-deps + explicit pins: reproducible, and onnxruntime's inference path only
  # imports numpy (flatbuffers/packaging/protobuf are declared deps, kept for parity).
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/wheels" \
      --platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 \
      --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
      $key >&2
  "$PY" - "$tmp/wheels" "$tmp/site" <<'EOF'
import sys, os, zipfile, glob, shutil
src, dst = sys.argv[1:]
for w in sorted(glob.glob(os.path.join(src, "*.whl"))):
    with zipfile.ZipFile(w) as z:
        z.extractall(dst)
# move *.data/{purelib,platlib} into place, drop scripts/headers
for d in glob.glob(os.path.join(dst, "*.data")):
    for sub in ("purelib", "platlib"):
        p = os.path.join(d, sub)
        if os.path.isdir(p):
            shutil.copytree(p, dst, dirs_exist_ok=True)
    shutil.rmtree(d)
EOF
  (cd "$tmp/wheels" && sha256sum *.whl) > "$tmp/site/WHEELS.sha256"
  du -cb "$tmp"/wheels/*.whl | tail -1 | sed 's/total/bytes downloaded (wheels)/' >&2
  rm -rf "$CACHE/site" && mv "$tmp/site" "$CACHE/site" && rm -rf "$tmp"
  # Precompile .pyc once under emulation (the Debian stdlib ships none); the run
  # wrapper then sets PYTHONDONTWRITEBYTECODE=1 so runs never write to the cache.
  log "site: precompiling bytecode under emulation"
  env -i PYTHONNOUSERSITE=1 "$CACHE/qemu/qemu-aarch64" -L "$CACHE/sysroot" \
      "$CACHE/sysroot/usr/bin/python3.11" -s -m compileall -q -j 1 \
      "$CACHE/sysroot/usr/lib/python3.11" "$CACHE/site" >/dev/null || true
  stamp_set site "$key"
}

site_key="onnxruntime==$ORT_VERSION numpy==$NUMPY_VERSION $EXTRA_WHEELS"
if [ "${REFRESH:-0}" != 1 ] && [ -f "$CACHE/qemu.stamp" ] && [ -x "$CACHE/qemu/qemu-aarch64" ] \
   && [ -f "$CACHE/sysroot.stamp" ] && [ -x "$CACHE/sysroot/usr/bin/python3.11" ] \
   && stamp_ok site "$site_key" && [ -d "$CACHE/site/onnxruntime" ] && [ -f "$CACHE/manifest.txt" ]; then
  log "all cached (REFRESH=1 re-resolves Debian versions)"
  exit 0
fi
if [ "${REFRESH:-0}" = 1 ] || ! [ -f "$CACHE/qemu.stamp" ] || ! [ -x "$CACHE/qemu/qemu-aarch64" ]; then step_qemu; fi
if [ "${REFRESH:-0}" = 1 ] || ! [ -f "$CACHE/sysroot.stamp" ] || ! [ -x "$CACHE/sysroot/usr/bin/python3.11" ]; then step_sysroot; fi
step_site
# apt lists + pkgcache are ~260 MB and only needed to resolve versions
[ "${KEEP_APT:-0}" = 1 ] || rm -rf "$CACHE"/apt-amd64 "$CACHE"/apt-arm64

# smoke test: the emulated interpreter imports numpy and onnxruntime
env -i PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 OPENBLAS_NUM_THREADS=1 \
    PYTHONPATH="$CACHE/site" "$CACHE/qemu/qemu-aarch64" -L "$CACHE/sysroot" -cpu neoverse-n1 \
    "$CACHE/sysroot/usr/bin/python3.11" -s -c \
    'import numpy, onnxruntime as o; print("ok numpy", numpy.__version__, "onnxruntime", o.__version__, o.get_available_providers())' >&2

# What was fetched, exactly (written last: its presence says provisioning completed).
{
  cat "$CACHE/qemu/VERSION"
  echo "sysroot: $(cat "$CACHE/sysroot.stamp")"
  echo "site: $(cat "$CACHE/site.stamp")"
  sed 's/^/deb /' "$CACHE/sysroot/DEBS.sha256"
  sed 's/^/whl /' "$CACHE/site/WHEELS.sha256"
} > "$CACHE/manifest.txt.tmp"
mv "$CACHE/manifest.txt.tmp" "$CACHE/manifest.txt"
du -sh "$CACHE"/qemu "$CACHE"/sysroot "$CACHE"/site >&2
