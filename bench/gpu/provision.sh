#!/usr/bin/env bash
# Provision the GPU machine from .gpu-carry/ (made by bench/gpu/pack.sh); run from the repo root THERE:
#
#   bash bench/gpu/provision.sh && . /opt/gst/env.sh
#
# 1. unpacks gst-runtime.tar.xz into $GST_DEST (default /opt/gst)
# 2. builds PyGObject (sdist, -Dpycairo=disabled) for $PYTHON (default /opt/torch/.venv/bin/python3) into
#    $GST_DEST/site, against the carried glib/girepository
# 3. builds gst-python 1.28.6 for that Python: libgstpython (plugin loader) + gi overrides (_gi_gst, ...)
# 4. writes $GST_DEST/env.sh and installs inferstream editable into $PYTHON's environment without deps
# 5. verifies: ldd closure, gst-inspect nvh264dec / cudaconvert / pyinfer, gi imports, and a real
#    nvh264enc → mp4 → nvh264dec round trip (frames counted). GPU checks are skipped where there is no GPU.
# Idempotent: each step is skipped when its stamp matches its inputs. Prints the time of each step.
# Knobs: GST_DEST, PYTHON, GPU_CARRY, SKIP_PIP=1 (no pip install), SKIP_VERIFY=1, JOBS.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CARRY=${GPU_CARRY:-$ROOT/.gpu-carry}
DEST=${GST_DEST:-/opt/gst}
PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
JOBS=${JOBS:-$(nproc)}
SITE=$DEST/site
BUILD=$DEST/build
LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)

die() { echo "provision: $*" >&2; exit 1; }
T0=$SECONDS
timed() {   # timed "label" cmd...: run, print its duration
  local label=$1 t=$SECONDS; shift
  "$@"
  printf 'provision: %-34s %4d s   (total %d s)\n' "$label" $((SECONDS - t)) $((SECONDS - T0))
}
logrun() {  # quiet build step: log to a file, show its tail on failure
  local log=$1; shift
  "$@" > "$log" 2>&1 || { tail -60 "$log" >&2; die "step failed: $* (log: $log)"; }
}
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

[ -f "$CARRY/gst-runtime.tar.xz" ] || die "no $CARRY/gst-runtime.tar.xz: run bench/gpu/pack.sh on the dev machine and carry .gpu-carry"
[ -x "$PYTHON" ] || die "no Python at $PYTHON (set PYTHON)"
MESON=$(dirname "$PYTHON")/meson; [ -x "$MESON" ] || MESON=$(command -v meson) || die "meson not found"
NINJA=$(dirname "$PYTHON")/ninja; [ -x "$NINJA" ] || NINJA=$(command -v ninja) || die "ninja not found"
command -v pkg-config >/dev/null || die "pkg-config not found"
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYLIBDIR=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
RUNTIME_SUM=$(sha256sum "$CARRY/gst-runtime.tar.xz" | cut -c1-16)

# --- 1. unpack (Python's tarfile: xz-utils need not be there) --------------------------------------------------
unpack() {
  stamp_ok "$DEST/.stamp-runtime" "$RUNTIME_SUM" && { echo "provision: runtime up to date in $DEST"; return; }
  rm -rf "$DEST"; mkdir -p "$DEST"
  "$PYTHON" - "$CARRY/gst-runtime.tar.xz" "$DEST" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as tf:
    for m in tf.getmembers():
        m.name = m.name.split("/", 1)[1] if "/" in m.name else "."
    kw = {"filter": "tar"} if hasattr(tarfile, "data_filter") else {}
    tf.extractall(sys.argv[2], **kw)
EOF
  # PyGObject links -lffi: point the linker name at the system's libffi.so.8 (only the runtime is installed)
  local ffi
  ffi=$("$LDCONFIG" -p | awk '$1 == "libffi.so.8" && /x86-64/ {print $NF; exit}')
  [ -n "$ffi" ] || die "libffi.so.8 not found on this machine"
  ln -sf "$ffi" "$DEST/lib/libffi.so"
  echo "$RUNTIME_SUM" > "$DEST/.stamp-runtime"
}

build_env() {   # the environment both builds use: only the carried .pc files, the carried libraries first
  export PKG_CONFIG_LIBDIR=$DEST/lib/pkgconfig PKG_CONFIG_PATH=
  export LD_LIBRARY_PATH=$DEST/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$(dirname "$PYTHON"):$DEST/bin:$PATH
}

# --- 2. PyGObject ----------------------------------------------------------------------------------------------
build_pygobject() {
  local sdist key src
  sdist=$(ls "$CARRY"/src/pygobject-*.tar.gz | head -1)
  key="$RUNTIME_SUM $(basename "$sdist") $PYTHON"
  stamp_ok "$DEST/.stamp-pygobject" "$key" && { echo "provision: PyGObject up to date"; return; }
  mkdir -p "$BUILD"; rm -rf "$BUILD"/pygobject-*
  tar -C "$BUILD" -xzf "$sdist"
  src=$(ls -d "$BUILD"/pygobject-*/ | head -1)
  logrun "$BUILD/pygobject.setup.log" "$MESON" setup "$BUILD/pygobject.b" "$src" --wipe --prefix="$DEST" \
    --libdir=lib --buildtype=release --wrap-mode=nofallback -Dpython="$PYTHON" -Dpycairo=disabled -Dtests=false \
    -Dpython.platlibdir="$SITE" -Dpython.purelibdir="$SITE" -Dc_link_args="-L$DEST/lib -Wl,-rpath,$DEST/lib"
  logrun "$BUILD/pygobject.compile.log" "$NINJA" -C "$BUILD/pygobject.b" -j"$JOBS"
  logrun "$BUILD/pygobject.install.log" "$MESON" install -C "$BUILD/pygobject.b" --no-rebuild
  echo "$key" > "$DEST/.stamp-pygobject"
}

# --- 3. gst-python: libgstpython (plugin loader) + overrides, for this Python ---------------------------------
build_gst_python() {
  local tarball key src
  tarball=$(ls "$CARRY"/src/gst-python-*.tar.xz | head -1)
  key="$RUNTIME_SUM $(basename "$tarball") $PYTHON $(cat "$DEST/.stamp-pygobject")"
  stamp_ok "$DEST/.stamp-gst-python" "$key" && { echo "provision: gst-python up to date"; return; }
  mkdir -p "$BUILD"; rm -rf "$BUILD"/gst-python-*/
  "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$tarball" "$BUILD"
  src=$(ls -d "$BUILD"/gst-python-*/ | head -1)
  # RUNPATH: the prefix's lib/ from lib/gstreamer-1.0/ and from site/gi/overrides/, and libpython's dir
  logrun "$BUILD/gst-python.setup.log" "$MESON" setup "$BUILD/gst-python.b" "$src" --wipe --prefix="$DEST" \
    --libdir=lib --buildtype=release --wrap-mode=nofallback -Dplugin=enabled -Dtests=disabled \
    -Dpython-exe="$PYTHON" -Dlibpython-dir="$PYLIBDIR" -Dpygi-overrides-dir="$SITE/gi/overrides" \
    -Dpython.platlibdir="$SITE" -Dpython.purelibdir="$SITE" \
    -Dc_link_args="-L$DEST/lib -Wl,--enable-new-dtags,-rpath,\$ORIGIN/..:$DEST/lib:$PYLIBDIR"
  logrun "$BUILD/gst-python.compile.log" "$NINJA" -C "$BUILD/gst-python.b" -j"$JOBS"
  logrun "$BUILD/gst-python.install.log" "$MESON" install -C "$BUILD/gst-python.b" --no-rebuild
  # gst-python's example elements (GES formatter) would only make the loader print errors
  rm -rf "$DEST/lib/gstreamer-1.0/python"
  grep -h 'PY_LIB_FNAME' "$BUILD/gst-python.b/config.h" || true
  echo "$key" > "$DEST/.stamp-gst-python"
}

# --- 4. env file + inferstream ---------------------------------------------------------------------------------
find_nvrtc() {
  local f
  for f in /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so.1[0-9] \
           /usr/local/cuda-*/targets/x86_64-linux/lib/libnvrtc.so.1[0-9] \
           "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"/nvidia/cu*/lib/libnvrtc.so.1[0-9] \
           "$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"/nvidia/cuda_nvrtc/lib/libnvrtc.so.1[0-9]; do
    [ -e "$f" ] && { echo "$f"; return; }
  done
  "$LDCONFIG" -p | awk '$1 ~ /^libnvrtc\.so\.[0-9]+$/ && /x86-64/ {print $NF; exit}'
}
write_env() {
  local nvrtc
  nvrtc=$(find_nvrtc || true)
  cat > "$DEST/env.sh" <<EOF
# written by bench/gpu/provision.sh: . $DEST/env.sh
export GST_PREFIX="$DEST"
# the interpreter's bin first: libgstpython's Py_Initialize() takes its stdlib/site from the first python3 on PATH
export PATH="$(dirname "$PYTHON"):$DEST/bin:\${PATH}"
# gi dlopens libraries by soname; the carried glib lives here too
export LD_LIBRARY_PATH="$DEST/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export GI_TYPELIB_PATH="$DEST/lib/girepository-1.0"
export GST_PLUGIN_SYSTEM_PATH="$DEST/lib/gstreamer-1.0"
export GST_PLUGIN_SCANNER="$DEST/libexec/gstreamer-1.0/gst-plugin-scanner"
export GST_REGISTRY="$DEST/registry.x86_64.bin"
# PyGObject (gi) and the Gst overrides built for Python $PYVER
export PYTHONPATH="$SITE\${PYTHONPATH:+:\$PYTHONPATH}"
# our elements: <dir>/python/*.py
export GST_PLUGIN_PATH="$ROOT/plugins\${GST_PLUGIN_PATH:+:\$GST_PLUGIN_PATH}"
# cudaconvert/cudascale compile their kernels with NVRTC; GStreamer only tries "libnvrtc.so" by itself
export GST_CUDA_NVRTC_LIBNAME="${nvrtc}"
EOF
  echo "provision: wrote $DEST/env.sh (NVRTC: ${nvrtc:-none found})"
}
install_inferstream() {
  [ "${SKIP_PIP:-0}" = 1 ] && { echo "provision: SKIP_PIP=1: inferstream not installed"; return; }
  if "$PYTHON" -c 'import inferstream, sys; sys.exit(0 if inferstream.__file__.startswith(sys.argv[1]) else 1)' \
      "$ROOT/src" 2>/dev/null; then
    echo "provision: inferstream already importable from $ROOT/src"; return
  fi
  # nothing can be downloaded there: no deps, no build isolation (setuptools is in the image)
  if ! "$PYTHON" -m pip install -q --no-deps --no-build-isolation --no-index -e "$ROOT" > "$BUILD/pip.log" 2>&1; then
    # an older setuptools may refuse pyproject.toml: a .pth file gives the same imports
    tail -5 "$BUILD/pip.log"
    local site
    site=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$ROOT/src" > "$site/inferstream-src.pth"
    echo "provision: WARNING pip install -e failed (log: $BUILD/pip.log); wrote $site/inferstream-src.pth instead"
  fi
  "$PYTHON" -c 'import inferstream; print("provision: inferstream from", inferstream.__file__)'
}

# --- 5. verify (failures are reported, counted, and make the exit status 2; the builds above stop at once) ------
FAILED=()
fail() { echo "  FAIL $*"; FAILED+=("$1"); }
have_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }
verify_ldd() {
  local f bad=0
  while IFS= read -r f; do
    if ldd "$f" 2>/dev/null | grep 'not found' >/dev/null; then
      echo "  unresolved in $f:"; ldd "$f" | grep 'not found'; bad=1
    fi
  done < <(find "$DEST/bin" "$DEST/libexec" "$DEST/lib" "$SITE" -type f \( -name '*.so*' -o -perm -u+x \) \
             ! -name '*.py' ! -name '*.typelib' ! -name '*.pc' ! -name '*.h')
  [ $bad = 0 ] && echo "  ok  ldd: every library resolves" || fail ldd "libraries missing (see above)"
}
verify_gst() {
  # shellcheck disable=SC1091
  . "$DEST/env.sh"
  rm -f "$GST_REGISTRY"
  gst-inspect-1.0 --version
  local el
  for el in videotestsrc h264parse qtdemux mp4mux filesink fakesink videoconvert appsink tee x264enc python \
            cudaupload cudadownload cudaconvert nvh264dec nvh264enc pyinfer; do
    case $el in cuda*|nv*) have_gpu || { echo "  --  $el (no GPU here: skipped)"; continue; } ;; esac
    if gst-inspect-1.0 "$el" >/dev/null 2>&1; then echo "  ok  $el"; continue; fi
    if [ "$el" = nvh264enc ] || [ "$el" = x264enc ]; then
      echo "  --  $el not registered (optional; H100/H200 have no NVENC, x264enc needs WITH_X264=1 in pack.sh)"
      continue
    fi
    fail "$el" "not registered"
    case $el in
      python|pyinfer) gst-inspect-1.0 -b | tail -5; GST_DEBUG=python:5 gst-inspect-1.0 "$el" 2>&1 | tail -15 ;;
      cuda*|nv*) rm -f "$GST_REGISTRY"; GST_DEBUG=2,nvcodec:5,cudaloader:5 gst-inspect-1.0 nvcodec 2>&1 | tail -15 ;;
    esac
  done
  gst-inspect-1.0 pyinfer 2>/dev/null | sed -n '/Factory Details/,/^$/p'
  python3 -c '
import gi
for ns in ("Gst", "GstAnalytics", "GstCuda", "GstVideo", "GstApp"):
    gi.require_version(ns, "1.0")
from gi.repository import Gst, GstAnalytics, GstCuda, GstVideo, GstApp
Gst.init(None)
print("  ok  python: PyGObject", gi.__version__, "imports Gst, GstAnalytics, GstCuda;", Gst.version_string())
' || fail gi "python cannot import Gst/GstAnalytics/GstCuda"
}
verify_nvcodec() {
  have_gpu || { echo "provision: no GPU: nvh264enc/nvh264dec round trip skipped"; return; }
  local tmp t out n enc
  tmp=$(mktemp -d)
  # NVENC where the GPU has one; H100/H200 have only NVDEC, then x264enc makes the clip
  enc=nvh264enc
  gst-inspect-1.0 nvh264enc >/dev/null 2>&1 || enc="x264enc speed-preset=ultrafast"
  t=$SECONDS
  # shellcheck disable=SC2086
  if ! gst-launch-1.0 -q videotestsrc num-buffers=60 ! video/x-raw,width=1920,height=1080,format=I420 ! $enc \
      ! h264parse ! mp4mux ! filesink location="$tmp/t.mp4"; then
    fail encode "encode pipeline ($enc) failed"; return
  fi
  echo "  ok  encoded 60 × 1080p with ${enc%% *} in $((SECONDS - t)) s: $(stat -c %s "$tmp/t.mp4") bytes"
  t=$SECONDS
  out=$(gst-launch-1.0 -v filesrc location="$tmp/t.mp4" ! qtdemux ! h264parse ! nvh264dec \
    ! fakesink silent=false 2>&1) || { echo "$out" | tail -20; fail nvh264dec "decode pipeline failed"; return; }
  n=$(grep -c 'last-message = chain' <<<"$out" || true)
  echo "  decoded $n frames with nvh264dec in $((SECONDS - t)) s; $(grep -o 'nvh264dec0.src: caps = .*' <<<"$out" | head -1 | cut -c1-140)"
  [ "$n" = 60 ] && echo "  ok  nvh264dec frame count" || fail nvh264dec-count "expected 60 decoded frames, got $n"
  rm -rf "$tmp"
}

main() {
  echo "provision: $CARRY -> $DEST for $PYTHON (Python $PYVER, libpython in $PYLIBDIR), meson $("$MESON" --version)"
  timed "unpack runtime" unpack
  build_env
  timed "build PyGObject" build_pygobject
  timed "build gst-python" build_gst_python
  timed "env file" write_env
  timed "pip install -e . (no deps)" install_inferstream
  [ "${SKIP_VERIFY:-0}" = 1 ] && return
  timed "verify ldd" verify_ldd
  timed "verify gst-inspect + gi" verify_gst
  timed "verify nvh264enc/dec" verify_nvcodec
  if [ ${#FAILED[@]} -gt 0 ]; then
    echo "provision: built in $((SECONDS - T0)) s, but checks FAILED: ${FAILED[*]}"; exit 2
  fi
  echo "provision: done in $((SECONDS - T0)) s, all checks passed — now: . $DEST/env.sh"
}

main "$@"
