"""runner.stream.StreamRunner: one stream's path (skip, map, infer in the batch group, write, track) without
GStreamer. Real ModelStep (the blob model of tests/blobs.py) and BatchGroup; frames are RawFrames handed in as the
"buffers", mapped as they are; the writer keeps what it is given."""
from __future__ import annotations

import threading
from contextlib import nullcontext
from typing import Any

import pytest
import torch

from inferstream.batching import BatchGroup
from inferstream.detections import Detections
from inferstream.inference import InferConfig, ModelStep
from inferstream.rawframe import RawFrame
from inferstream.runner.stream import StreamRunner

CFG = InferConfig(model="blobs:color_blob_detector", family="yolo-end2end", labels=("red", "green", "blue"),
                  precision="fp32")


def _frame(x: int, colour: int = 0) -> RawFrame:
    """A black 200x120 RGB frame with a 40x40 square of ``colour`` (0 red, 1 green, 2 blue) at (x, 30)."""
    img = torch.zeros((120, 200, 3), dtype=torch.uint8)
    img[30:70, x:x + 40, colour] = 255
    return RawFrame("RGB", 200, 120, (img,))


class _Writer:
    """Keeps each buffer's detections and the labels they were written with."""

    def __init__(self) -> None:
        self.written: list[tuple[Any, Detections, tuple[str, ...]]] = []

    def detections(self, buf: Any, dets: Detections, labels: tuple[str, ...]) -> None:
        self.written.append((buf, dets, labels))

    def classifications(self, *args: object) -> None:
        raise AssertionError("a primary runner writes no classifications")


class _SeatedTracker:
    """Stands in for a TrackStage seated on the stream: records the frames tracked in batches and outside them."""

    def __init__(self) -> None:
        self.seated_frames: list[Any] = []
        self.batched: list[tuple[Any, Any]] = []

    def track_seated(self, buf: Any) -> None:
        self.seated_frames.append(buf)

    def track_together(self, frames: list[tuple[Any, Any]]) -> None:
        self.batched.extend(frames)

    def leave(self) -> None:
        pass


@pytest.fixture(scope="module")
def model() -> ModelStep:
    return ModelStep(CFG)


def _runner(model: ModelStep, members: int = 1, interval: int = 0) -> tuple[list[StreamRunner], _Writer]:
    group = BatchGroup("stream", CFG, model, batch_size=members, max_latency_s=30.0)
    writer = _Writer()
    runners = [StreamRunner(group.join(), CFG.params, writer, interval=interval) for _ in range(members)]
    for r in runners:
        r.set_memory("system", None, mapper=nullcontext)
    return runners, writer


def test_each_buffer_gets_its_own_frames_detections_in_frame_pixels(model: ModelStep) -> None:
    (runner,), writer = _runner(model)
    frames = [_frame(10, 0), _frame(120, 2)]
    for f in frames:
        runner.process(f)
    assert [buf for buf, _, _ in writer.written] == frames
    (_, red, labels), (_, blue, _) = writer.written
    assert labels == ("red", "green", "blue") and red.labels.tolist() == [0] and blue.labels.tolist() == [2]
    torch.testing.assert_close(red.boxes_xyxy[0], torch.tensor([10.0, 30, 50, 70]), atol=1.5, rtol=0)
    torch.testing.assert_close(blue.boxes_xyxy[0], torch.tensor([120.0, 30, 160, 70]), atol=1.5, rtol=0)


def test_streams_of_one_group_are_inferred_in_one_batch(model: ModelStep) -> None:
    runners, writer = _runner(model, members=3)
    frames = [_frame(10 + 50 * k) for k in range(3)]
    threads = [threading.Thread(target=r.process, args=(f,)) for r, f in zip(runners, frames)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    group = runners[0].group
    assert group.stats.batches == 1 and group.stats.frames == 3
    by_frame = {id(buf): dets for buf, dets, _ in writer.written}
    for k, f in enumerate(frames):
        assert by_frame[id(f)].boxes_xyxy[0, 0].item() == pytest.approx(10 + 50 * k, abs=1.5)


def test_interval_infers_every_nth_frame_and_a_seated_tracker_tracks_the_others(model: ModelStep) -> None:
    (runner,), writer = _runner(model, interval=2)
    tracker = _SeatedTracker()
    runner.member.tracker = tracker  # type: ignore[assignment]
    frames = [_frame(10 + 10 * i) for i in range(7)]
    for f in frames:
        runner.process(f)
    inferred = [frames[i] for i in (0, 3, 6)]
    assert [buf for buf, _, _ in writer.written] == inferred
    assert tracker.batched == [(tracker, f) for f in inferred]  # tracked in the batch, right after writing
    assert tracker.seated_frames == [frames[i] for i in (1, 2, 4, 5)]  # the skipped ones, on this thread
    runner.restart()  # a flushing seek: frame numbers count from 0 again
    runner.process(frames[0])
    assert writer.written[-1][0] is frames[0]


def test_a_frame_that_cannot_be_mapped_fails_its_stream(model: ModelStep) -> None:
    (runner,), writer = _runner(model)

    def unmappable(buf: Any) -> Any:
        raise ValueError("cannot map this buffer")

    runner.set_memory("system", None, mapper=unmappable)
    with pytest.raises(ValueError, match="cannot map this buffer"):
        runner.process(_frame(10))
    assert not writer.written


def test_nvmm_memory_has_no_per_frame_mapping() -> None:
    from inferstream.frames.memory import frame_mapper

    with pytest.raises(ValueError, match="no per-frame mapping for 'nvmm' memory"):
        frame_mapper("nvmm", None)
