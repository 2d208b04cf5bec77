#!/usr/bin/env bash
# Make DIR hold the pinned GStreamer release tarballs, each checked against tools/gst-sources.sha256.
#   tools/fetch-gst-sources.sh DIR
# A tarball already in DIR is only checked; a missing one is downloaded from
#   $GST_SOURCES_URL/<module>/<file>   (default: GStreamer's release site, the layout of its src/ tree)
# and kept only when its SHA256 matches: the pinned sum (tools/gst-sources.sha256: the offline copies, made with
# `git archive` from the release tags) or the one the release site publishes beside the file (<file>.sha256sum: the
# site's own tarballs are packed differently, so their bytes differ from the offline copies). Any failure is one
# line on stderr and exit status 1.
set -euo pipefail
SUMS="$(cd "$(dirname "$0")" && pwd)/gst-sources.sha256"
DIR=${1:?usage: tools/fetch-gst-sources.sh DIR}
URL=${GST_SOURCES_URL:-https://gstreamer.freedesktop.org/src}
URL=${URL%/}

die() { echo "fetch-gst-sources: $*" >&2; exit 1; }
command -v curl >/dev/null || die "curl not found: install curl (apt-get install curl ca-certificates)"
mkdir -p "$DIR" || die "cannot create $DIR"

while read -r sum file; do
  [ -n "$file" ] || continue
  if [ -f "$DIR/$file" ]; then
    got=$(sha256sum "$DIR/$file" | cut -d' ' -f1)
    [ "$got" = "$sum" ] || die "$DIR/$file does not match its pinned SHA256 (got $got, expected $sum): remove it to download it again"
    continue
  fi
  module=${file%-*}  # gst-plugins-bad-1.28.6.tar.xz -> gst-plugins-bad
  echo "   downloading $URL/$module/$file"
  part="$DIR/.$file.part"
  if ! err=$(curl -fsSL --retry 2 --connect-timeout 20 -o "$part" "$URL/$module/$file" 2>&1); then
    rm -f "$part"
    die "cannot download $URL/$module/$file (${err##*curl: }); check the network or set GST_SOURCES_URL to a mirror, or GST_SOURCES_DIR to a folder holding the tarballs"
  fi
  got=$(sha256sum "$part" | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    published=$(curl -fsSL --retry 2 --connect-timeout 20 "$URL/$module/$file.sha256sum" 2>/dev/null | cut -d' ' -f1 || true)
    if [ -z "$published" ] || [ "$got" != "$published" ]; then
      rm -f "$part"
      die "$URL/$module/$file does not match its pinned SHA256 nor a published $file.sha256sum (got $got, expected $sum): not kept"
    fi
    echo "   $file: matches the SHA256 published beside it (the release site's tarball, not the offline copy)"
  fi
  mv "$part" "$DIR/$file"
done < "$SUMS"
