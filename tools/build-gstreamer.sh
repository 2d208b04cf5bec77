#!/usr/bin/env bash
# Build the pinned GStreamer (default 1.28.6) + orc into a project-local prefix.
# Called by ./setup; usable alone:  PREFIX=... VENV=... GST_SOURCES_DIR=... tools/build-gstreamer.sh
# Needs: the build packages (./setup installs them), a venv with meson, ninja and PyGObject.
set -euo pipefail

: "${PREFIX:?PREFIX not set}" "${VENV:?VENV not set}" "${GST_SOURCES_DIR:?GST_SOURCES_DIR not set}"
WORK=${WORK:-$(dirname "$PREFIX")}
GST_VERSION=${GST_VERSION:-1.28.6}
ORC_VERSION=${ORC_VERSION:-0.4.42}
JOBS=${JOBS:-$(nproc)}
SRC=$WORK/src
BUILD=$WORK/build
MODULES=(gstreamer gst-plugins-base gst-plugins-good gst-plugins-bad gst-plugins-ugly gst-libav gst-python)

die() { echo "build-gstreamer: $*" >&2; exit 1; }

# Quiet build steps: the log goes to a file, its tail to stderr on failure.
logrun() {
  local log=$1; shift
  "$@" > "$log" 2>&1 || { tail -40 "$log" >&2; die "step failed, full log: $log"; }
}

check_sources() {
  local f
  for f in "orc-$ORC_VERSION" "${MODULES[@]/%/-$GST_VERSION}"; do
    [ -f "$GST_SOURCES_DIR/$f.tar.xz" ] || die "missing $GST_SOURCES_DIR/$f.tar.xz — download the GStreamer $GST_VERSION release tarballs (and orc $ORC_VERSION) into one folder and set GST_SOURCES_DIR"
  done
  if [ -f "$GST_SOURCES_DIR/SHA256SUMS" ]; then
    (cd "$GST_SOURCES_DIR" && sha256sum --quiet -c SHA256SUMS) || die "checksum mismatch in $GST_SOURCES_DIR (SHA256SUMS)"
  fi
}

extract() {
  mkdir -p "$SRC"
  local m
  for m in "orc-$ORC_VERSION" "${MODULES[@]/%/-$GST_VERSION}"; do
    rm -rf "${SRC:?}/$m"
    tar -C "$SRC" -xf "$GST_SOURCES_DIR/$m.tar.xz"
  done
}

# PyGObject's wheel ships pygobject.h but no pygobject-3.0.pc; gst-python looks it up by pkg-config.
write_pygobject_pc() {
  local inc ver
  inc=$(dirname "$(find "$VENV/include" -name pygobject.h -print -quit)")
  [ -d "$inc" ] || die "pygobject.h not found under $VENV/include (is PyGObject installed in the venv?)"
  ver=$("$VENV/bin/python" -c 'import gi; print(gi.__version__)')
  mkdir -p "$WORK/pkgconfig"
  printf 'Name: PyGObject\nDescription: PyGObject in %s\nVersion: %s\nRequires: gobject-2.0\nCflags: -I%s\n' \
    "$VENV" "$ver" "$inc" > "$WORK/pkgconfig/pygobject-3.0.pc"
}

# $ORIGIN RUNPATH valid from bin/, lib/, lib/gstreamer-1.0/ and libexec/gstreamer-1.0/: the prefix is relocatable.
RPATH_FLAGS="-Wl,--enable-new-dtags,-rpath,\$ORIGIN/../lib:\$ORIGIN/..:\$ORIGIN/../../lib:\$ORIGIN"

build_module() {
  local name=$1 dir=$2; shift 2
  local t0=$SECONDS
  rm -rf "${BUILD:?}/$name"
  logrun "$BUILD/$name.setup.log" meson setup "$BUILD/$name" "$SRC/$dir" \
    --prefix="$PREFIX" --libdir=lib --buildtype=release --wrap-mode=nodownload \
    -Dauto_features=disabled -Dtests=disabled \
    -Dc_link_args="$RPATH_FLAGS ${EXTRA_LDFLAGS:-}" -Dcpp_link_args="$RPATH_FLAGS ${EXTRA_LDFLAGS:-}" "$@"
  logrun "$BUILD/$name.compile.log" ninja -C "$BUILD/$name" -j"$JOBS"
  logrun "$BUILD/$name.install.log" meson install -C "$BUILD/$name" --no-rebuild --quiet
  echo "  built $name in $((SECONDS - t0)) s"
}

main() {
  check_sources
  mkdir -p "$BUILD"
  write_pygobject_pc
  extract
  rm -rf "$PREFIX"
  export PATH="$VENV/bin:$PREFIX/bin:$PATH"
  export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig:$WORK/pkgconfig"
  export LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export GI_TYPELIB_PATH="$PREFIX/lib/girepository-1.0"
  export XDG_DATA_DIRS="$PREFIX/share:${XDG_DATA_DIRS:-/usr/local/share:/usr/share}"
  local v=$GST_VERSION pyver pylibdir
  pyver=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  pylibdir=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
  local common=(-Ddoc=disabled -Dnls=disabled)

  build_module orc "orc-$ORC_VERSION" -Dorc-test=disabled -Dbenchmarks=disabled -Dexamples=disabled \
    -Dhotdoc=disabled -Dtools=enabled
  build_module gstreamer "gstreamer-$v" "${common[@]}" -Dexamples=disabled -Dintrospection=enabled \
    -Dtools=enabled -Dcoretracers=enabled -Dcheck=disabled -Dbenchmarks=disabled -Dlibunwind=disabled \
    -Dlibdw=disabled -Dbash-completion=disabled -Dptp-helper=disabled
  build_module gst-plugins-base "gst-plugins-base-$v" "${common[@]}" -Dexamples=disabled \
    -Dintrospection=enabled -Dtools=enabled -Dorc=enabled -Dapp=enabled -Dvideoconvertscale=enabled \
    -Dvideotestsrc=enabled -Dvideorate=enabled -Dplayback=enabled -Dtypefind=enabled -Dpango=enabled \
    -Doverlaycomposition=enabled -Daudioconvert=enabled -Daudioresample=enabled -Daudiotestsrc=enabled \
    -Dvolume=enabled -Dgio=enabled -Dpbtypes=enabled -Dcompositor=enabled
  build_module gst-plugins-good "gst-plugins-good-$v" "${common[@]}" -Dexamples=disabled -Dorc=enabled \
    -Disomp4=enabled -Dmatroska=enabled -Dbz2=enabled -Dvideofilter=enabled -Dvideocrop=enabled \
    -Djpeg=enabled -Dpng=enabled -Drtp=enabled -Drtpmanager=enabled -Drtsp=enabled -Dudp=enabled \
    -Dmultifile=enabled -Dautodetect=enabled -Davi=enabled -Ddebugutils=enabled
  build_module gst-plugins-bad "gst-plugins-bad-$v" "${common[@]}" -Dexamples=disabled \
    -Dintrospection=enabled -Dorc=enabled -Dtools=disabled -Danalyticsoverlay=enabled \
    -Dvideoparsers=enabled -Dtensordecoders=enabled -Dnvcodec=enabled -Ddebugutils=enabled \
    -Dmpegtsdemux=enabled -Dmpegtsmux=enabled
  build_module gst-plugins-ugly "gst-plugins-ugly-$v" "${common[@]}" -Dorc=enabled -Dgpl=enabled -Dx264=enabled
  build_module gst-libav "gst-libav-$v" -Ddoc=disabled
  # libgstpython links the interpreter's libpython; the gi override modules need the prefix's lib/.
  # The override sources (Gst.py...) go to meson's python install dir, not to pygi-overrides-dir: pin it, or
  # Debian 13's python3 sends them to lib/python3/dist-packages, away from the compiled halves.
  local site="$PREFIX/lib/python$pyver/site-packages"
  EXTRA_LDFLAGS="-Wl,-rpath,$pylibdir:\$ORIGIN/../../../.." build_module gst-python "gst-python-$v" \
    -Dplugin=enabled -Dpython-exe="$VENV/bin/python" -Dlibpython-dir="$pylibdir" \
    -Dpygi-overrides-dir="$site/gi/overrides" -Dpython.platlibdir="$site" -Dpython.purelibdir="$site"
  # gst-python's own example elements (GES formatter) would only make the loader print errors.
  rm -rf "$PREFIX/share/locale" "$PREFIX/lib/gstreamer-1.0/python" "$SRC"
}

main "$@"
