"""The inferstream-vlm-answer custom meta: written, read back field by field, also by GStreamer's own API."""
from __future__ import annotations

import gi
import numpy as np

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.meta.vlm import ANSWER_META, attach_answer, read_answers
from inferstream.vlm.types import ObjectRef, VlmAnswer, VlmRequest

Gst.init(None)


def test_answer_meta_round_trip_two_answers_unicode_json_and_64_bit_pts() -> None:
    image = (np.zeros((2, 2, 3), np.uint8),)
    crop = VlmRequest(image, "p", "cam1", 37, 2**40, ObjectRef(3, 12, "person", (10, 20, 64, 128)))
    buf = Gst.Buffer.new()
    attach_answer(buf, VlmAnswer(crop, text="une personne en manteau rouge — 人", latency_s=0.0414), od_id=3)
    attach_answer(buf, VlmAnswer(VlmRequest(image, "p", "cam1", 38, 5), text="{}", json_value={"n": 2}))
    first, second = read_answers(buf)
    assert (first.text, first.stream_id, first.pts_ns, first.frame) == ("une personne en manteau rouge — 人", "cam1",
                                                                      2**40, 37)
    assert (first.od_id, first.track_id, first.label, first.box_xywh, first.latency_ms, first.json) == \
        (3, 12, "person", (10, 20, 64, 128), 41, None)
    assert (second.od_id, second.track_id, second.label, second.json) == (-1, -1, "", '{"n":2}')
    # the documented structure, as any GStreamer reader sees it
    s = buf.get_custom_meta(ANSWER_META).get_structure()
    assert s.get_name() == ANSWER_META and s.get_value("text").startswith("une") and s.get_value("pts") == 2**40


def test_answer_meta_absent_reads_empty() -> None:
    assert read_answers(Gst.Buffer.new()) == []
