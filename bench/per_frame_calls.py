"""What one call into Python per buffer costs a GStreamer pipeline, and what mapping a batch's boxes back costs.

    python bench/per_frame_calls.py [--buffers 30000] [--repeats 3]

Rows, each against the same pipeline without it (``videotestsrc ! identity ! fakesink``, 16x16 frames, so the
pipeline itself costs a few µs a buffer):

- a Python pad probe on every buffer that reads its pts (what the app counted frames with before pyinfer's
  ``frames_out``);
- a Python in-place ``BaseTransform`` whose ``do_transform_ip`` does nothing (what a pytracker whose frames its
  pyinfer tracks in the batch cost per buffer before it went passthrough);
- the same element in passthrough with ``transform_ip_on_passthrough`` cleared
  (``native.gst.skip_transform_ip_in_passthrough``, what such a pytracker costs now).

Then ``ops.frame_rows.rows_in_frames``: 8 frames x 20 rows from model-input to frame pixels, split per frame (µs per batch).
On a pipeline where many threads want the GIL each of these calls also waits for it; these figures are the
uncontended floor.
"""
from __future__ import annotations

import argparse
import time
from types import SimpleNamespace
from typing import Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
from gi.repository import GObject, Gst, GstBase

Gst.init(None)


class _Nop(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "BenchNop"
    __gstmetadata__ = ("nop", "Filter", "does nothing, in Python", "bench")
    __gsttemplates__ = tuple(Gst.PadTemplate.new(name, direction, Gst.PadPresence.ALWAYS, Gst.Caps.new_any())
                             for name, direction in (("src", Gst.PadDirection.SRC), ("sink", Gst.PadDirection.SINK)))

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)

    def do_transform_ip(self, _buf: Gst.Buffer) -> Gst.FlowReturn:
        return Gst.FlowReturn.OK


def _per_buffer_us(middle: str, buffers: int, setup: Any = None) -> float:
    pipeline = Gst.parse_launch(f"videotestsrc num-buffers={buffers} ! video/x-raw,width=16,height=16 ! {middle} "
                                "name=m ! fakesink sync=false")
    if setup is not None:
        setup(pipeline.get_by_name("m"))
    started = time.perf_counter()
    pipeline.set_state(Gst.State.PLAYING)
    pipeline.get_bus().timed_pop_filtered(Gst.CLOCK_TIME_NONE, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    elapsed = time.perf_counter() - started
    pipeline.set_state(Gst.State.NULL)
    return elapsed / buffers * 1e6


def _probe(element: Gst.Element) -> None:
    def read_pts(_pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        info.get_buffer().pts  # noqa: B018 (what the app's probe read)
        return Gst.PadProbeReturn.OK
    element.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, read_pts)


def _in_frames_us(rounds: int = 2000) -> float:
    import torch

    from inferstream.detections import Detections
    from inferstream.ops.letterbox import Letterbox

    try:
        from inferstream.ops.frame_rows import rows_in_frames
    except ImportError:  # a tree before the split (--in-frames-only on an older src/)
        from inferstream.inference import ModelStep

        def rows_in_frames(*args: Any) -> Any:
            return ModelStep._in_frames(None, *args)  # type: ignore[arg-type, attr-defined]

    torch.set_num_threads(1)
    frames, rows = [SimpleNamespace(height=1080, width=1920)] * 8, 20
    ids = torch.arange(8).repeat_interleave(rows)
    dets = Detections(boxes_xyxy=torch.rand(8 * rows, 4) * 600, scores=torch.rand(8 * rows),
                      labels=torch.randint(0, 80, (8 * rows,)))
    lb = Letterbox(torch.full((8,), 1 / 3), torch.full((8,), 1 / 3), torch.zeros(8), torch.full((8,), 140.0))
    for _ in range(100):
        rows_in_frames(frames, dets, ids, lb)  # type: ignore[arg-type]
    started = time.perf_counter()
    for _ in range(rounds):
        rows_in_frames(frames, dets, ids, lb)  # type: ignore[arg-type]
    return (time.perf_counter() - started) / rounds * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--buffers", type=int, default=30000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--in-frames-only", action="store_true", help="only the last row (runs on an older tree too)")
    args = ap.parse_args()
    if not args.in_frames_only:
        _per_buffer_rows(args.buffers, args.repeats)
    print(f"\n`rows_in_frames` (the way back to frame pixels), 8 frames x 20 rows: {' / '.join(f'{_in_frames_us():.0f}' for _ in range(3))} "
          "µs per batch")


def _per_buffer_rows(buffers: int, repeats: int) -> None:
    from inferstream.native.gst import skip_transform_ip_in_passthrough

    GObject.type_register(_Nop)
    Gst.Element.register(None, "benchnop", Gst.Rank.NONE, _Nop)
    rows: dict[str, list[float]] = {"a Python pad probe reading pts": [], "a Python do_transform_ip": [],
                                    "passthrough, transform_ip skipped": []}
    for _ in range(repeats):
        base = _per_buffer_us("identity", buffers)
        rows["a Python pad probe reading pts"].append(_per_buffer_us("identity", buffers, _probe) - base)
        rows["a Python do_transform_ip"].append(_per_buffer_us("benchnop", buffers) - base)
    assert skip_transform_ip_in_passthrough("BenchNop"), "transform_ip_on_passthrough not where expected"
    for _ in range(repeats):
        base = _per_buffer_us("identity", buffers)
        rows["passthrough, transform_ip skipped"].append(
            _per_buffer_us("benchnop", buffers, lambda e: e.set_passthrough(True)) - base)
    print("| per buffer, over `videotestsrc ! identity ! fakesink` | µs (each repeat) |\n|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {' / '.join(f'{v:.1f}' for v in values)} |")


if __name__ == "__main__":
    main()
