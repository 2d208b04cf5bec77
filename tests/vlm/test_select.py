"""Schedules of inferstream.vlm.select against hand-worked sequences."""
from __future__ import annotations

import pytest

from inferstream.vlm.select import ClipCollector, FrameSchedule, TrackSchedule
from inferstream.vlm.types import ObjectRef, VlmRequestError, render_prompt

MS = 1_000_000


def test_frame_schedule_every_n_frames_and_every_n_seconds() -> None:
    frames = FrameSchedule(every_frames=3)
    assert [f for f in range(10) if frames.due(f, f * 33 * MS)] == [0, 3, 6, 9]
    timed = FrameSchedule(every_frames=1, every_ns=100 * MS)
    assert [f for f in range(10) if timed.due(f, f * 40 * MS)] == [0, 3, 6, 9]  # 0, 120, 240, 360 ms
    timed.reset()
    assert timed.due(5, 0)


def test_track_schedule_new_tracks_only_or_every_interval() -> None:
    new = TrackSchedule(new_only=True)
    assert [new.due(t, i * 100 * MS) for i, t in enumerate([1, 1, 2, 1, 2])] == [True, False, True, False, False]
    every = TrackSchedule(every_ns=250 * MS)
    assert [every.due(7, i * 100 * MS) for i in range(7)] == [True, False, False, True, False, False, True]
    every.forget_before(10_000 * MS, 1_000 * MS)
    assert every.due(7, 10_000 * MS)  # forgotten: new again


def test_clip_collector_takes_every_stride_th_frame() -> None:
    clip = ClipCollector(length=3, stride=2)
    out = [clip.add(f, f) for f in range(8)]
    assert out[4] == [0, 2, 4] and out[7] is None and all(o is None for i, o in enumerate(out) if i != 4)
    assert clip.collecting  # frame 6 started the next clip


def test_render_prompt_fills_fields_and_reports_bad_templates() -> None:
    obj = ObjectRef(3, 12, "person", (0, 0, 1, 1))
    assert render_prompt("{label} #{track_id} on {stream_id}", stream_id="cam1", obj=obj) == "person #12 on cam1"
    assert render_prompt("{{literal}} {label}", stream_id="c", obj=None) == "{literal} "
    with pytest.raises(VlmRequestError, match=r"prompt template '\{colour\}' failed: KeyError") as err:
        render_prompt("{colour}", stream_id="c", obj=obj)
    assert err.value.kind == "prompt"
