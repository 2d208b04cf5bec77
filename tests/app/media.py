"""Media helpers for the app tests: short H.264 clips made with a real encoder, and a real decoder to count frames."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gst_helpers import run_pipeline

# the tiny real model of tests/blobs.py: one box per dominant-colour region, end-to-end (B, 3, 6) output
BLOBS: dict[str, Any] = {"model": "blobs:color_blob_detector", "model-family": "yolo-end2end",
                         "labels": "red,green,blue"}
CLIP_FRAMES = (6, 8, 10, 12)  # distinct lengths: a stream mix-up shows as a wrong count


def encode_clip(path: Path, frames: int, pattern: str = "smpte", size: tuple[int, int] = (160, 120)) -> Path:
    w, h = size
    result = run_pipeline(f"videotestsrc pattern={pattern} num-buffers={frames} "
                          f"! video/x-raw,width={w},height={h},framerate=10/1 ! x264enc speed-preset=ultrafast "
                          f"! h264parse ! mp4mux ! filesink location={path}", timeout_s=60)
    assert result.eos and not result.errors, result.errors
    return path


def decoded_frames(path: Path) -> int:
    """Frames a real demux + decode pipeline gets out of ``path`` (0 when it cannot be played)."""
    result = run_pipeline(f"filesrc location={path} ! qtdemux ! h264parse ! avdec_h264 ! identity name=count "
                          "! fakesink", {"count": lambda buf: buf.pts}, timeout_s=60)
    return len(result.seen.get("count", [])) if result.eos and not result.errors else 0
