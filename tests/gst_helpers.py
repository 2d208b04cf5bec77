"""Run real pipelines in tests and collect what a probe sees (meta read back through meta/gstanalytics.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

Gst.init(None)


@dataclass
class RunResult:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    elements: list[Gst.Structure] = field(default_factory=list)
    eos: bool = False
    seen: dict[str, list[Any]] = field(default_factory=dict)


def run_pipeline(description: str, probes: dict[str, Callable[[Gst.Buffer], Any]] | None = None,
                 timeout_s: float = 120.0, on_start: Callable[[Gst.Pipeline], None] | None = None,
                 on_message: Callable[[Gst.Pipeline, Gst.Message], None] | None = None,
                 before_play: Callable[[Gst.Pipeline], None] | None = None) -> RunResult:
    """Play ``description`` to EOS or error; ``probes`` maps an element name to a function run on each buffer
    leaving that element's src pad, whose return values are collected in ``seen[name]``."""
    pipeline = Gst.parse_launch(description)
    result = RunResult()
    for name, fn in (probes or {}).items():
        pad = pipeline.get_by_name(name).get_static_pad("src")
        seen = result.seen.setdefault(name, [])

        def probe(_pad: Gst.Pad, info: Gst.PadProbeInfo, fn: Callable = fn, seen: list = seen) -> Gst.PadProbeReturn:
            seen.append(fn(info.get_buffer()))
            return Gst.PadProbeReturn.OK

        pad.add_probe(Gst.PadProbeType.BUFFER, probe)
    if before_play:
        before_play(pipeline)
    bus = pipeline.get_bus()
    pipeline.set_state(Gst.State.PLAYING)
    if on_start:
        on_start(pipeline)
    deadline = timeout_s * Gst.SECOND
    try:
        while True:
            msg = bus.timed_pop_filtered(deadline, Gst.MessageType.ERROR | Gst.MessageType.EOS
                                         | Gst.MessageType.WARNING | Gst.MessageType.ELEMENT)
            if msg is None:
                raise TimeoutError(f"pipeline did not finish within {timeout_s} s: {description}")
            if on_message:
                on_message(pipeline, msg)
            if msg.type == Gst.MessageType.ERROR:
                err, dbg = msg.parse_error()
                result.errors.append(f"{err.message} | {dbg}")
                break
            if msg.type == Gst.MessageType.WARNING:
                err, dbg = msg.parse_warning()
                result.warnings.append(f"{err.message} | {dbg}")
            elif msg.type == Gst.MessageType.ELEMENT:
                result.elements.append(msg.get_structure().copy())
            elif msg.type == Gst.MessageType.EOS:
                result.eos = True
                break
    finally:
        pipeline.set_state(Gst.State.NULL)
    return result


gi.require_version("GstBase", "1.0")
from gi.repository import GObject, GstBase

_INJECTORS: dict[str, Callable[[Gst.Buffer, int], None]] = {}


class MetaInjector(GstBase.BaseTransform):
    """Test element ``testinject name=N``: calls the function registered for N on each (writable) buffer —
    how tests attach known metadata upstream of the element under test."""

    __gtype_name__ = "InferstreamTestInject"
    __gstmetadata__ = ("test meta injector", "Filter", "tests only", "inferstream")
    __gsttemplates__ = (Gst.PadTemplate.new("sink", Gst.PadDirection.SINK, Gst.PadPresence.ALWAYS, Gst.Caps.new_any()),
                        Gst.PadTemplate.new("src", Gst.PadDirection.SRC, Gst.PadPresence.ALWAYS, Gst.Caps.new_any()))

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)
        self._count = 0

    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        _INJECTORS[self.get_name()](buf, self._count)
        self._count += 1
        return Gst.FlowReturn.OK


GObject.type_register(MetaInjector)
Gst.Element.register(None, "testinject", Gst.Rank.NONE, MetaInjector)


def inject(name: str, fn: Callable[[Gst.Buffer, int], None]) -> None:
    """Register ``fn(buffer, index)`` for the ``testinject`` element called ``name``."""
    _INJECTORS[name] = fn


def labelled_boxes(buf: Gst.Buffer) -> tuple[list[str], Any]:
    """The buffer's detections as (label names, boxes_xyxy ndarray [N, 4]), sorted by label name."""
    import numpy as np

    from inferstream.meta.gstanalytics import read_detections

    meta = read_detections(buf)
    if meta is None:
        return [], np.zeros((0, 4))
    names = [meta.label_names[i] for i in meta.dets.labels.tolist()]
    order = np.argsort(names)
    return [names[i] for i in order], meta.dets.boxes_xyxy.numpy()[order]
