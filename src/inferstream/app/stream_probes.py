"""What the runner keeps per stream (``RunStream``) and the pad probes it attaches to a stream's bin: frame hooks,
the exact frame limit, EOS at each sink. Frames are counted by pyinfer itself (``frames_out``), not by a probe:
a Python call per buffer on every stream's thread is what the app must not add."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.app.metrics import StreamCounters
from inferstream.app.pipeline import StreamPlan
from inferstream.errors import InferstreamError

# (stream id, frame index within the stream, buffer leaving the last analytics element)
FrameHook = Callable[[str, int, Gst.Buffer], None]
Probe = Callable[[Gst.Pad, Gst.PadProbeInfo], Gst.PadProbeReturn]


class RunStream:
    """One stream of a run: its plan, its bin and what the runner counted of it."""

    def __init__(self, plan: StreamPlan, bin_: Gst.Bin) -> None:
        self.plan, self.bin = plan, bin_
        self.counters = StreamCounters(plan.id, plan.total_frames, plan.live)
        self.hook_index = 0
        self.qos_dropped: dict[str, int] = {}
        self.warnings: set[str] = set()
        self.removed = False
        self.duration_queries = 0


def attach_probes(stream: RunStream, frame_hooks: Sequence[FrameHook]) -> None:
    """Count the stream's frames through its pyinfer and add its probes (hooks, EOS at each sink, frame limit).

    Raises:
        InferstreamError: the bin lacks an element the plan names (a bug in the plan, not the user's input).
    """
    sp, bin_ = stream.plan, stream.bin
    infer = bin_.get_by_name(sp.infer)
    if infer is None:
        raise InferstreamError(f"internal: no {sp.infer} in {bin_.get_name()}")
    infer.frames_out = _on_frame(stream)
    if frame_hooks:
        _probe(bin_, sp.last, Gst.PadProbeType.BUFFER, "src", _on_hook(stream, tuple(frame_hooks)))
    for sink in sp.sinks:
        _probe(bin_, sink, Gst.PadProbeType.EVENT_DOWNSTREAM, "sink", _on_sink_event(stream, sink))
    if sp.limit:
        _probe(bin_, f"{sp.id}_limit", Gst.PadProbeType.BUFFER, "src", _on_limit(sp.limit))


def _probe(bin_: Gst.Bin, element: str, kind: Gst.PadProbeType, pad: str, fn: Probe) -> None:
    found = bin_.get_by_name(element)
    if found is None or found.get_static_pad(pad) is None:
        raise InferstreamError(f"internal: no {element}.{pad} in {bin_.get_name()}")
    found.get_static_pad(pad).add_probe(kind, fn)


def _on_frame(stream: RunStream) -> Callable[[int], None]:
    counters, unset = stream.counters, Gst.CLOCK_TIME_NONE  # looked up once: a gi lookup per frame is not free

    def counted(pts: int) -> None:
        counters.on_frame(None if pts == unset else pts)
    return counted


def _on_hook(stream: RunStream, frame_hooks: tuple[FrameHook, ...]) -> Probe:
    def probe(_pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        index, stream.hook_index = stream.hook_index, stream.hook_index + 1
        for hook in frame_hooks:
            try:
                hook(stream.plan.id, index, info.get_buffer())
            except Exception as exc:  # noqa: BLE001
                key = f"frame hook failed: {exc!r}"
                if key not in stream.warnings:
                    stream.warnings.add(key)
                    print(f"stream {stream.plan.id}: {key}", flush=True)
        return Gst.PadProbeReturn.OK
    return probe


def _on_limit(limit: int) -> Probe:
    """Exactly ``limit`` frames pass: identity's eos-after ended the source, this drops what a decoder drains."""
    passed = [0]

    def probe(_pad: Gst.Pad, _info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        passed[0] += 1
        return Gst.PadProbeReturn.OK if passed[0] <= limit else Gst.PadProbeReturn.DROP
    return probe


def _on_sink_event(stream: RunStream, sink: str) -> Probe:
    def probe(_pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        if info.get_event().type == Gst.EventType.EOS:
            stream.counters.eos_sinks.add(sink)
        return Gst.PadProbeReturn.OK
    return probe
