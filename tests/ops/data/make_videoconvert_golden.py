"""Regenerate ``videoconvert_golden.npz``: random YUV frames and what GStreamer's videoconvert makes of them.

Run from an activated environment (``. .venv/bin/activate``): ``python tests/ops/data/make_videoconvert_golden.py``.
Caps carry colorimetry but no chroma-site, as most decoders' caps do not either.
"""
from __future__ import annotations

from pathlib import Path

import gi
import numpy as np

gi.require_version("Gst", "1.0")
from gi.repository import Gst

OUT = Path(__file__).with_name("videoconvert_golden.npz")
SIZES = ((37, 23), (16, 12))  # (width, height): odd and even
COLORIMETRY = {"bt601": ("bt601", False), "bt709": ("bt709", False), "1:4:0:0": ("bt601", True),
               "1:3:0:0": ("bt709", True)}


def convert(data: bytes, in_caps: str) -> bytes:
    pipe = Gst.parse_launch(f'appsrc name=src caps="{in_caps}" ! videoconvert ! video/x-raw,format=RGB ! '
                            "appsink name=sink sync=false")
    src, sink = pipe.get_by_name("src"), pipe.get_by_name("sink")
    pipe.set_state(Gst.State.PLAYING)
    src.emit("push-buffer", Gst.Buffer.new_wrapped(data))
    src.emit("end-of-stream")
    buf = sink.emit("pull-sample").get_buffer()
    out = buf.extract_dup(0, buf.get_size())
    pipe.set_state(Gst.State.NULL)
    return out


def rgb_rows(data: bytes, width: int, height: int) -> np.ndarray:
    stride = (width * 3 + 3) // 4 * 4  # GStreamer pads RGB rows to 4 bytes
    return np.frombuffer(data, np.uint8).reshape(height, stride)[:, : width * 3].reshape(height, width, 3)


def main() -> None:
    Gst.init([])
    rng = np.random.default_rng(2024)
    arrays: dict[str, np.ndarray] = {"version": np.array(Gst.version_string())}
    for w, h in SIZES:
        hc, wc = (h + 1) // 2, (w + 1) // 2
        y = rng.integers(0, 256, (h, w), dtype=np.uint8)
        u = rng.integers(0, 256, (hc, wc), dtype=np.uint8)
        v = rng.integers(0, 256, (hc, wc), dtype=np.uint8)
        arrays |= {f"{w}x{h}_y": y, f"{w}x{h}_u": u, f"{w}x{h}_v": v}
        # GStreamer's default layout (video-info.c): rows padded to 4 bytes, the Y plane to an even row count
        def pad(a: np.ndarray, rows: int) -> np.ndarray:
            return np.pad(a, ((0, rows - a.shape[0]), (0, (-a.shape[1]) % 4)))

        y_plane = pad(y, 2 * hc).tobytes()
        i420 = y_plane + pad(u, hc).tobytes() + pad(v, hc).tobytes()
        nv12 = y_plane + pad(np.stack([u, v], -1).reshape(hc, 2 * wc), hc).tobytes()
        for colorimetry in COLORIMETRY:
            for fmt, data in (("I420", i420), ("NV12", nv12)):
                caps = f"video/x-raw,format={fmt},width={w},height={h},framerate=0/1,colorimetry={colorimetry}"
                arrays[f"{w}x{h}_{fmt}_{colorimetry}"] = rgb_rows(convert(data, caps), w, h)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) with GStreamer {Gst.version_string()}")


if __name__ == "__main__":
    main()
