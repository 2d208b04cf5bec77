"""VLM answers on buffers: a ``GstCustomMeta`` named ``inferstream-vlm-answer``, one per answer.

Free text cannot go into quarks (they are never freed) and Python cannot register a new GstMeta/Mtd type, so an
answer travels as a custom meta (``gst_meta_register_custom_simple``, GStreamer >= 1.20) whose GstStructure holds::

    inferstream-vlm-answer, text=(string)"a person in a red coat", stream-id=(string)cam1,
        pts=(guint64)1234000000, frame=(guint64)37, od-id=(gint64)3, track-id=(gint64)12, label=(string)person,
        x=(gint64)10, y=(gint64)20, w=(gint64)64, h=(gint64)128, latency-ms=(gint64)41, json=(string)"..."

* ``pts``/``frame``: the frame the answer describes (in async mode it rides on a later buffer of the stream);
* ``od-id``: the ODMtd of *this* buffer's GstAnalyticsRelationMeta that the answer is about (the crop's object in
  sync mode; in async mode the ODMtd with the same track id on the carrying buffer), -1 for whole-frame answers or
  when the object is not on the carrying buffer; ``track-id``, ``label`` and the box (in the described frame's pixels)
  identify it independently of the buffer;
* ``json``: the answer parsed and re-serialised when a JSON schema was asked for, else absent.

Written through ctypes (``_custom``: gst-python only hands out copies of a custom meta's structure). Readers:
:func:`read_answers` here; C/Rust ``gst_buffer_iterate_meta_filtered`` + ``gst_custom_meta_get_structure``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from inferstream.meta import _custom

if TYPE_CHECKING:
    from gi.repository import Gst

    from inferstream.vlm.types import VlmAnswer

ANSWER_META: Final = "inferstream-vlm-answer"


@dataclass(frozen=True, slots=True)
class AnswerMeta:
    """One ``inferstream-vlm-answer`` meta read back (see the module docstring for the fields)."""

    text: str
    stream_id: str
    pts_ns: int
    frame: int
    od_id: int
    track_id: int
    label: str
    box_xywh: tuple[int, int, int, int]
    latency_ms: int
    json: str | None


def register_answer_meta() -> None:
    """Register the meta (idempotent; after Gst.init)."""
    _custom.register(ANSWER_META)


def attach_answer(buf: Gst.Buffer, answer: VlmAnswer, od_id: int = -1) -> None:
    """Add one answer meta to the writable ``buf``; ``od_id`` relates it to an ODMtd of ``buf`` (-1: none)."""
    req = answer.request
    obj = req.obj
    x, y, w, h = obj.box_xywh if obj else (0, 0, 0, 0)
    fields: dict[str, str | int] = {
        "text": answer.text, "stream-id": req.stream_id, "label": obj.label if obj else "",
    }
    ints = {"od-id": od_id, "track-id": obj.track_id if obj else -1, "x": x, "y": y, "w": w, "h": h,
            "latency-ms": round(answer.latency_s * 1000)}
    uints = {"pts": max(req.pts_ns, 0), "frame": req.frame}
    if answer.json_value is not None:
        fields["json"] = json.dumps(answer.json_value, separators=(",", ":"), ensure_ascii=False)
    _custom.add(buf, ANSWER_META, strings=fields, int64s=ints, uint64s=uints)


def read_answers(buf: Gst.Buffer) -> list[AnswerMeta]:
    """Every answer meta of ``buf``, in the order they were added."""
    out = []
    for s in _custom.structures(buf, ANSWER_META):
        get_i = _custom.int64_getter(s)
        out.append(AnswerMeta(
            text=_custom.get_string(s, "text") or "", stream_id=_custom.get_string(s, "stream-id") or "",
            pts_ns=_custom.get_uint64(s, "pts"), frame=_custom.get_uint64(s, "frame"), od_id=get_i("od-id"),
            track_id=get_i("track-id"), label=_custom.get_string(s, "label") or "",
            box_xywh=(get_i("x"), get_i("y"), get_i("w"), get_i("h")), latency_ms=get_i("latency-ms"),
            json=_custom.get_string(s, "json")))
    return out
