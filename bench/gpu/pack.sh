#!/usr/bin/env bash
# Assemble .gpu-carry/: everything the GPU machine (Ubuntu 24.04, no glib/GStreamer/PyGObject, no network)
# needs to run our GStreamer 1.28.6 prefix. Runs HERE, on the Debian 12 dev machine, after ./setup.
#
#   bench/gpu/pack.sh            # -> .gpu-carry/{gst-runtime.tar.xz, src/, MANIFEST.txt}
#
# What goes in (see bench/gpu/README.md):
#   gst-runtime.tar.xz  one tree "gst/" that provision.sh unpacks to /opt/gst:
#     bin/ libexec/    gst-launch-1.0, gst-inspect-1.0, gst-plugin-scanner (stripped)
#     lib/             GStreamer + orc libraries, the Debian 12 libraries Ubuntu 24.04 lacks (glib, gobject, gio,
#                      gmodule, girepository-1.0: computed from the ELF NEEDED closure), linker symlinks
#     lib/gstreamer-1.0/  plugins, without those that drag more libraries (pango, jpeg, png, libav; x264 unless
#                      WITH_X264=0) and without libgstpython (Python-version specific: built there)
#     lib/girepository-1.0/  Gst* typelibs + GLib/GObject/Gio/GModule/GIRepository typelibs
#     include/ lib/pkgconfig/ lib/glib-2.0/include/  headers and relocatable .pc files (prefix=${pcfiledir}/../..)
#                      to compile PyGObject and gst-python there
#   src/pygobject-3.50.x.tar.gz, src/gst-python-1.28.6.tar.xz   sources built there for its Python 3.12
#   wheels/py_spy-*.whl  the sampling profiler run.sh GIL_PROFILE=1 uses (optional)
#   appwheels/*.whl      what the app (inferstream run) needs beyond that machine's torch venv: PyYAML, pydantic
# Idempotent: the tarball is rebuilt each run (about 30 s); the PyGObject sdist is downloaded once.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PREFIX=${GST_PREFIX:-$ROOT/.gst/prefix}
CARRY=${GPU_CARRY:-$ROOT/.gpu-carry}
GST_VERSION=${GST_VERSION:-1.28.6}
GST_SOURCES_DIR=${GST_SOURCES_DIR:-$ROOT/../shared/deps/gstreamer-$GST_VERSION}
VENV=${VENV:-$ROOT/.venv}
PYGOBJECT_SPEC=${PYGOBJECT_SPEC:-PyGObject<3.51}   # >= 3.51 needs girepository-2.0 (glib >= 2.80)
WITH_X264=${WITH_X264:-1}   # the H200 has NVDEC but no NVENC: x264enc makes the H.264 test clips there
MULTIARCH=x86_64-linux-gnu

# Sonames the GPU machine's Ubuntu 24.04 image has (glibc, the toolchain runtime, and the libraries of the
# base image and of its Python 3.12): anything the prefix needs that is NOT here is copied from Debian 12.
UBUNTU_2404_HAS=(
  ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1
  libgcc_s.so.1 libstdc++.so.6 libz.so.1 libbz2.so.1.0 liblzma.so.5 libzstd.so.1 libffi.so.8 libpcre2-8.so.0
  libselinux.so.1 libmount.so.1 libblkid.so.1 libuuid.so.1 libcrypt.so.1 libexpat.so.1
)
# Plugins left out: they need libraries the GPU runs do not use (pango/cairo, jpeg, png, FFmpeg; x264 with
# WITH_X264=0), or are
# built there for its Python (python). analyticsoverlay needs pango/cairo; the GstAnalytics library stays.
DROP_PLUGINS=(analyticsoverlay pango jpeg png libav python)
[ "$WITH_X264" = 1 ] || DROP_PLUGINS+=(x264)
# Debian packages holding the -dev files and libraries taken from the system (fetched with apt-get download
# when not installed).
DEB_PKGS=(libglib2.0-0 libglib2.0-dev libgirepository-1.0-1 libgirepository1.0-dev gir1.2-glib-2.0 libffi-dev)
GLIB_PCS=(glib-2.0 gobject-2.0 gio-2.0 gmodule-2.0 gmodule-no-export-2.0 gobject-introspection-1.0 libffi)
GLIB_TYPELIBS=(GLib-2.0 GObject-2.0 Gio-2.0 GModule-2.0 GIRepository-2.0)

die() { echo "pack: $*" >&2; exit 1; }
t_start=$SECONDS
step() { echo "pack: [$((SECONDS - t_start)) s] $*"; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
STAGE=$WORK/gst

# --- where the Debian files come from: / when installed, else an unpacked apt-get download --------------------
SYSROOT=/
sysroot_for_debs() {
  local missing=() p
  for p in "${DEB_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  step "apt-get download ${missing[*]} (not installed)"
  mkdir -p "$WORK/debs" "$WORK/root"
  # all packages from one place, so versions match each other
  (cd "$WORK/debs" && apt-get download "${DEB_PKGS[@]}" >/dev/null) || die "apt-get download failed (apt-get update?)"
  local d
  for d in "$WORK"/debs/*.deb; do dpkg -x "$d" "$WORK/root"; done
  SYSROOT=$WORK/root
}

# --- 1. the prefix, trimmed ----------------------------------------------------------------------------------
stage_prefix() {
  [ -x "$PREFIX/bin/gst-inspect-1.0" ] || die "no GStreamer prefix at $PREFIX: run ./setup first"
  mkdir -p "$STAGE"/{bin,lib/gstreamer-1.0,lib/girepository-1.0,lib/pkgconfig,libexec/gstreamer-1.0,include}
  cp -a "$PREFIX"/bin/{gst-inspect-1.0,gst-launch-1.0,gst-typefind-1.0,gst-discoverer-1.0} "$STAGE/bin/"
  cp -a "$PREFIX/libexec/gstreamer-1.0/gst-plugin-scanner" "$STAGE/libexec/gstreamer-1.0/"
  cp -a "$PREFIX"/lib/lib*.so* "$STAGE/lib/"
  local p base keep d
  for p in "$PREFIX"/lib/gstreamer-1.0/libgst*.so; do
    base=$(basename "$p" .so); base=${base#libgst}; keep=1
    for d in "${DROP_PLUGINS[@]}"; do [ "$base" = "$d" ] && keep=0; done
    [ $keep = 1 ] && cp -a "$p" "$STAGE/lib/gstreamer-1.0/"
  done
  cp -a "$PREFIX"/lib/girepository-1.0/*.typelib "$STAGE/lib/girepository-1.0/"
  cp -a "$PREFIX/include/gstreamer-1.0" "$STAGE/include/"
  # the CUDA headers include <cuda.h>; GStreamer's stub of it is not installed: nothing we build needs gst/cuda
  find "$STAGE" -type f \( -name '*.so*' -o -path '*/bin/*' -o -path '*/libexec/*' \) \
    -exec strip --strip-unneeded {} + 2>/dev/null || true
}

# --- 2. Debian 12 libraries the prefix needs and Ubuntu 24.04 lacks (ELF NEEDED closure) --------------------
needed_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
in_list() { local x=$1; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }
resolve_soname() {   # a soname -> the file on this machine (or in the unpacked .debs)
  local so=$1 f
  for f in "$SYSROOT/usr/lib/$MULTIARCH/$so" "$SYSROOT/lib/$MULTIARCH/$so" "/usr/lib/$MULTIARCH/$so" \
           "/lib/$MULTIARCH/$so"; do
    [ -e "$f" ] && { echo "$f"; return; }
  done
  ldconfig -p | awk -v s="$so" '$1 == s && /x86-64/ {print $NF; exit}'
}
copy_deps_closure() {
  local queue=() seen=() carried=() f so src
  mapfile -t queue < <(find "$STAGE" -type f \( -name '*.so*' -o -path '*/bin/*' -o -path '*/libexec/*' \))
  queue+=("$(resolve_soname libgirepository-1.0.so.1)")   # PyGObject 3.50 links it; nothing in the prefix does
  while [ ${#queue[@]} -gt 0 ]; do
    f=${queue[0]}; queue=("${queue[@]:1}")
    [ -n "$f" ] || die "libgirepository-1.0.so.1 not found (libgirepository-1.0-1)"
    if [[ $f != "$STAGE"/* ]]; then            # a system library to carry
      so=$(basename "$f")
      in_list "$so" "${carried[@]}" && continue
      cp -L "$f" "$STAGE/lib/$so"; carried+=("$so"); f=$STAGE/lib/$so
    fi
    for so in $(needed_of "$f"); do
      in_list "$so" "${seen[@]}" && continue
      seen+=("$so")
      [ -e "$STAGE/lib/$so" ] && continue
      in_list "$so" "${UBUNTU_2404_HAS[@]}" && continue
      src=$(resolve_soname "$so"); [ -n "$src" ] || die "$so (needed by $f) not found on this machine"
      queue+=("$src")
    done
  done
  strip --strip-unneeded "${carried[@]/#/$STAGE/lib/}" 2>/dev/null || true
  CARRIED_LIBS=("${carried[@]}")
  step "carried Debian 12 libraries: ${carried[*]}"
}

# --- 3. headers, linker symlinks, typelibs and relocatable .pc files for building PyGObject + gst-python -------
# prefix=${pcfiledir}/../.. makes each .pc valid wherever the tree is unpacked. Requires.private / Libs.private
# are dropped: they name .pc files (libmount, libpcre2-8, orc, ...) that the GPU machine does not have, and we
# only ever link shared.
relocate_pc() {   # src.pc dst.pc old-prefix
  sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
      -e 's|^libdir=.*|libdir=${prefix}/lib|' -e 's|^includedir=.*|includedir=${prefix}/include|' \
      -e '/^Requires.private:/d' -e '/^Libs.private:/d' -e "s|$3|\${prefix}|g" "$1" > "$2"
}
stage_dev() {
  local inc=$SYSROOT/usr/include pcdir=$SYSROOT/usr/lib/$MULTIARCH/pkgconfig pc so t
  cp -a "$inc/glib-2.0" "$inc/gobject-introspection-1.0" "$STAGE/include/"
  cp -a "$inc/$MULTIARCH"/{ffi.h,ffitarget.h} "$STAGE/include/"
  mkdir -p "$STAGE/lib/glib-2.0/include"
  cp -a "$SYSROOT/usr/lib/$MULTIARCH/glib-2.0/include/glibconfig.h" "$STAGE/lib/glib-2.0/include/"
  for pc in "${GLIB_PCS[@]}"; do relocate_pc "$pcdir/$pc.pc" "$STAGE/lib/pkgconfig/$pc.pc" /usr; done
  # Debian keeps ffi.h in the multiarch include dir and relies on the default library path for -lffi; here both
  # sit in the tree (provision.sh links lib/libffi.so to the GPU machine's libffi.so.8)
  sed -i -e 's|^includedir=.*|includedir=${prefix}/include|' -e 's|^Libs: *-lffi|Libs: -L${libdir} -lffi|' \
    "$STAGE/lib/pkgconfig/libffi.pc"
  for pc in "$PREFIX"/lib/pkgconfig/*.pc; do
    relocate_pc "$pc" "$STAGE/lib/pkgconfig/$(basename "$pc")" "$PREFIX"
  done
  for so in glib-2.0 gobject-2.0 gio-2.0 gmodule-2.0 girepository-1.0; do
    ln -sf "lib$so.so.$( [ $so = girepository-1.0 ] && echo 1 || echo 0)" "$STAGE/lib/lib$so.so"
  done
  for t in "${GLIB_TYPELIBS[@]}"; do
    cp -a "$SYSROOT/usr/lib/$MULTIARCH/girepository-1.0/$t.typelib" "$STAGE/lib/girepository-1.0/"
  done
  # the .pc files must resolve alone (as on the GPU machine, which has none of these)
  PKG_CONFIG_LIBDIR=$STAGE/lib/pkgconfig pkg-config --cflags --libs gstreamer-analytics-1.0 gstreamer-base-1.0 \
    gmodule-no-export-2.0 gobject-introspection-1.0 gio-2.0 libffi > /dev/null || die "staged .pc files do not resolve"
  ! grep -rl "$PREFIX\|/usr/lib/$MULTIARCH" "$STAGE/lib/pkgconfig" || die "absolute paths left in .pc files"
}

# --- 4. sources built there ------------------------------------------------------------------------------------
pip_fetch() {   # DIR GLOB PIP-DOWNLOAD-ARGS...: download into DIR unless a GLOB file is there; fails if none is after
  local dir=$1 glob=$2; shift 2
  compgen -G "$dir/$glob" >/dev/null && return 0
  "$VENV/bin/pip" download -q -d "$dir" "$@" 2>&1 | grep -v '^WARNING: Location' || true
  compgen -G "$dir/$glob" >/dev/null
}

stage_sources() {
  mkdir -p "$CARRY/src"
  local gp=$GST_SOURCES_DIR/gst-python-$GST_VERSION.tar.xz
  [ -f "$gp" ] || die "missing $gp"
  cp -f "$gp" "$CARRY/src/"
  if ! ls "$CARRY"/src/pygobject-*.tar.gz >/dev/null 2>&1; then
    step "pip download $PYGOBJECT_SPEC (sdist)"
    # pip prepares the sdist's metadata even with --no-deps: give it meson-python (and the venv's meson/ninja)
    # without build isolation, so nothing is installed into the project's venv.
    "$VENV/bin/pip" install -q --target "$WORK/mesonpy" meson-python >/dev/null
    PYTHONPATH=$WORK/mesonpy PATH=$VENV/bin:$PATH pip_fetch "$CARRY/src" 'pygobject-*.tar.gz' --no-deps \
      --no-binary :all: --no-build-isolation "$PYGOBJECT_SPEC" || die "PyGObject sdist download failed"
  fi
  # py-spy (a static binary in a wheel) for run.sh GIL_PROFILE=1; optional
  pip_fetch "$CARRY/wheels" 'py_spy-*.whl' --no-deps --only-binary :all: "py-spy==0.4.3" \
    || echo "pack: no py-spy wheel: run.sh GIL_PROFILE=1 will not work"
  # the app's own dependencies that the GPU machine's venv lacks, built for its Python 3.12 (app_workers.py)
  pip_fetch "$CARRY/appwheels" 'pydantic_core-*.whl' --only-binary :all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 "pyyaml>=6" "pydantic>=2.5" \
    || echo "pack: no app wheels: app_workers.py will not run there"
}

main() {
  command -v readelf >/dev/null || die "readelf missing (binutils)"
  mkdir -p "$CARRY"
  rm -f "$CARRY/gst-runtime.tar.xz" "$CARRY/MANIFEST.txt"
  sysroot_for_debs
  step "staging the prefix ($PREFIX)"
  stage_prefix
  copy_deps_closure
  stage_dev
  stage_sources
  step "compressing ($(du -sh "$STAGE" | cut -f1) staged)"
  tar -C "$WORK" --owner=0 --group=0 --sort=name -cf - gst | xz -T0 -9 > "$CARRY/gst-runtime.tar.xz"
  {
    echo "# .gpu-carry for the GPU machine, made by bench/gpu/pack.sh on $(date -u +%FT%TZ)"
    echo "gstreamer $GST_VERSION  from $PREFIX"
    echo "carried Debian 12 libraries: ${CARRIED_LIBS[*]}"
    echo "plugins left out: ${DROP_PLUGINS[*]}"
    (cd "$CARRY" && find . -type f ! -name MANIFEST.txt -print0 | sort -z | xargs -0 sha256sum)
  } > "$CARRY/MANIFEST.txt"
  du -ah "$CARRY" | sort -k2
  step "done: $(du -sh "$CARRY" | cut -f1) in $CARRY"
}

main "$@"
