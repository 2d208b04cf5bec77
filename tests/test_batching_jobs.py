"""batching.BatchGroup with FrameJobs: the batch's thread maps, infers and delivers for every member; a frame that
fails fails alone; the trackers registered with the members track the batch's frames. Real ModelStep (the blob
model of tests/blobs.py), real threads, no GStreamer."""
from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import pytest
import torch

from inferstream.batching import BatchGroup, Member
from inferstream.batching.groups import release_group
from inferstream.detections import Detections
from inferstream.inference import InferConfig, ModelStep
from inferstream.rawframe import RawFrame


def _square_frame(x: int) -> RawFrame:
    """A black RGB frame with a red 40x40 square at (x, 30)."""
    img = torch.zeros((120, 200, 3), dtype=torch.uint8)
    img[30:70, x:x + 40, 0] = 255
    return RawFrame("RGB", 200, 120, (img,))


class _Job:
    def __init__(self, frame: RawFrame | None) -> None:
        self._frame = frame
        self.buf = object()  # what a tracker would track
        self.dets: Detections | None = None
        self.mapped_thread: str | None = None
        self.delivered_thread: str | None = None

    def frame(self) -> AbstractContextManager[RawFrame]:
        self.mapped_thread = threading.current_thread().name
        if self._frame is None:
            raise ValueError("cannot map this buffer")
        return nullcontext(self._frame)

    def deliver(self, dets: Detections, model: ModelStep) -> None:
        self.delivered_thread = threading.current_thread().name
        self.dets = dets


@pytest.fixture(scope="module")
def group() -> BatchGroup:
    cfg = InferConfig(model="blobs:color_blob_detector", family="yolo-end2end", labels=("red", "green", "blue"),
                      precision="fp32")
    g = BatchGroup("jobs", cfg, ModelStep(cfg), batch_size=4, max_latency_s=5.0)
    for _ in range(4):
        g.join()
    return g


def test_one_thread_runs_the_batch_and_each_job_gets_its_own_frames_detections(group: BatchGroup) -> None:
    jobs = [_Job(_square_frame(10 + 40 * i)) for i in range(3)] + [_Job(None)]
    errors: dict[int, BaseException] = {}

    def member(i: int) -> None:
        try:
            group.infer(jobs[i], group.cfg.params)
        except BaseException as exc:
            errors[i] = exc

    threads = [threading.Thread(target=member, args=(i,), name=f"stream{i}") for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert list(errors) == [3] and "cannot map this buffer" in str(errors[3])  # the failing frame fails alone
    runners = {j.mapped_thread for j in jobs} | {j.delivered_thread for j in jobs[:3]}
    assert len(runners) == 1  # mapped and delivered by the one thread that ran the batch
    for i, job in enumerate(jobs[:3]):
        assert job.dets is not None and job.dets.labels.tolist() == [0]
        torch.testing.assert_close(job.dets.boxes_xyxy[0], torch.tensor([10.0 + 40 * i, 30, 50.0 + 40 * i, 70]),
                                   atol=1.5, rtol=0)
    assert group.stats.batches == 1 and group.stats.frames == 4


def _group(batch_size: int, members: int, max_latency_s: float) -> BatchGroup:
    cfg = InferConfig(model="blobs:color_blob_detector", family="yolo-end2end", labels=("red", "green", "blue"),
                      precision="fp32")
    g = BatchGroup("wake", cfg, ModelStep(cfg), batch_size=batch_size, max_latency_s=max_latency_s)
    for _ in range(members):
        g.join()
    return g


def _infer_in_thread(group: BatchGroup, job: _Job) -> threading.Thread:
    thread = threading.Thread(target=group.infer, args=(job, group.cfg.params))
    thread.start()
    return thread


def test_a_stream_that_ends_releases_the_frames_waiting_for_it() -> None:
    group = _group(batch_size=3, members=3, max_latency_s=60.0)
    jobs = [_Job(_square_frame(10)), _Job(_square_frame(90))]
    threads = [_infer_in_thread(group, job) for job in jobs]
    threads[1].join(0.3)
    assert all(t.is_alive() for t in threads)  # the batch waits for the third stream (up to a minute)
    group.leave_stream()  # ... which ends: the two waiting frames are a full batch now
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads) and all(j.dets is not None for j in jobs)
    assert group.stats.batches == 1 and group.stats.frames == 2


def test_frames_beyond_a_full_batch_run_in_the_next_batches() -> None:
    group = _group(batch_size=2, members=5, max_latency_s=0.2)
    jobs = [_Job(_square_frame(10 + 30 * i)) for i in range(5)]
    threads = [_infer_in_thread(group, job) for job in jobs]
    for t in threads:
        t.join(10)
    assert all(j.dets is not None and j.dets.labels.tolist() == [0] for j in jobs)
    assert group.stats.frames == 5 and group.stats.batches >= 3  # at most 2 per batch


def test_a_stream_that_rejoins_after_its_end_is_waited_for_again() -> None:
    group = _group(batch_size=2, members=2, max_latency_s=60.0)
    group.leave_stream()
    alone = _Job(_square_frame(10))
    _infer_in_thread(group, alone).join(10)  # one live stream: one frame is a full batch
    assert alone.dets is not None
    group.rejoin_stream()  # e.g. a flushing seek after EOS
    first = _infer_in_thread(group, _Job(_square_frame(50)))
    first.join(0.3)
    assert first.is_alive()  # waits for the other stream's frame again
    second = _infer_in_thread(group, _Job(_square_frame(90)))
    for t in (first, second):
        t.join(10)
    assert not first.is_alive() and not second.is_alive() and group.stats.batches == 2


class _OrderedJob(_Job):
    """Records the order of deliveries; its delivery can wait for an event (to hold its batch in delivery)."""

    def __init__(self, name: str, log: list[str], mapped: threading.Event | None = None,
                 hold_until: threading.Event | None = None) -> None:
        super().__init__(_square_frame(10))
        self.name, self._log, self._mapped, self._hold_until = name, log, mapped, hold_until
        self.saw_next_batch_mapping = False

    def frame(self) -> AbstractContextManager[RawFrame]:
        if self._mapped is not None:
            self._mapped.set()
        return super().frame()

    def deliver(self, dets: Detections, model: ModelStep) -> None:
        if self._hold_until is not None:
            self.saw_next_batch_mapping = self._hold_until.wait(10)
        self._log.append(self.name)
        super().deliver(dets, model)


def test_the_next_batch_infers_while_the_previous_one_delivers_and_deliveries_keep_their_order() -> None:
    group = _group(batch_size=2, members=4, max_latency_s=60.0)
    log: list[str] = []
    second_batch_mapped = threading.Event()
    first = [_OrderedJob("a", log, hold_until=second_batch_mapped), _OrderedJob("b", log)]
    second = [_OrderedJob("c", log, mapped=second_batch_mapped), _OrderedJob("d", log)]
    threads = [_infer_in_thread(group, job) for job in first]
    deadline = time.monotonic() + 10
    while not all(j.mapped_thread for j in first) and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first batch (full: a and b) runs
    threads += [_infer_in_thread(group, job) for job in second]
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert first[0].saw_next_batch_mapping  # batch 2 mapped its frames while batch 1 was still delivering
    assert log == ["a", "b", "c", "d"]  # ... and delivered after it
    assert group.stats.batches == 2 and group.stats.frames == 4


def _member_thread(group: BatchGroup, job: _Job, member: Member) -> threading.Thread:
    thread = threading.Thread(target=group.infer, args=(job, group.cfg.params, member))
    thread.start()
    return thread


def test_a_batchs_frames_are_tracked_once_by_their_members_trackers_after_every_delivery() -> None:
    group = _group(batch_size=4, members=0, max_latency_s=60.0)
    members = [group.join() for _ in range(4)]
    assert [m.index for m in members] == [0, 1, 2, 3]
    log: list[object] = []

    class Recorder:  # a BatchTracker that records what the group hands it
        def __init__(self, name: str) -> None:
            self.name = name

        def track_together(self, frames: list[tuple[Any, Any]]) -> None:
            log.append(([(t.name, buf) for t, buf in frames], [j.dets is not None for j in jobs],
                        threading.current_thread().name))

        def leave(self) -> None:
            log.append(f"{self.name} left")

    members[0].tracker, members[2].tracker = Recorder("tracker0"), Recorder("tracker2")
    jobs = [_Job(_square_frame(10 + 40 * i)) for i in range(4)]
    threads = [_member_thread(group, job, member) for job, member in zip(jobs, members)]
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads) and group.stats.batches == 1
    ((frames, delivered, thread),) = log  # one call for the whole batch ...
    assert sorted(frames, key=str) == [("tracker0", jobs[0].buf), ("tracker2", jobs[2].buf)]  # ... its tracked frames
    assert all(delivered)  # after every frame's detections were written
    assert thread == jobs[0].delivered_thread  # on the batch's thread
    release_group(members[2])
    assert log[-1] == "tracker2 left"  # leaving the group ends the registration


def test_infer_batch_runs_a_muxed_batch_at_once_and_counts_it(group: BatchGroup) -> None:
    """The NVMM path's chain without DeepStream: pitched RGBA surfaces (frames.nvmm.tensor_frame) inferred as one
    batch, then turned into nvinfer's fields at a muxer twice the surface size."""
    from inferstream.frames.nvmm import tensor_frame
    from inferstream.meta.nvds_fields import object_fields

    surfaces = []
    for x in (10, 90):
        memory = torch.zeros((120, 1024), dtype=torch.uint8)  # rows 1024 bytes apart: a surface pitch
        rgba = memory.as_strided((120, 200, 4), (1024, 4, 1))
        rgba[30:70, x:x + 40, 0], rgba[:, :, 3] = 255, 255
        surfaces.append(rgba)
    frames = [tensor_frame(s) for s in surfaces]
    before = group.stats.frames
    dets, labels = group.infer_batch(frames, group.cfg.params)
    assert labels == ("red", "green", "blue") and group.stats.frames == before + 2
    reference = group.model.infer([_square_frame(10), _square_frame(90)])
    for got, ref in zip(dets, reference):
        torch.testing.assert_close(got.boxes_xyxy, ref.boxes_xyxy)
    (first,), (second,) = (object_fields(d, labels, (200, 120), (400, 240), unique_id=1) for d in dets)
    assert (first.class_id, first.label) == (0, "red")
    assert abs(first.left - 20) <= 2 and abs(first.top - 60) <= 2 and abs(first.width - 80) <= 4
    assert abs(second.left - 180) <= 2
