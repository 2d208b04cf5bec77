"""pyinfer ``in-flight`` > 1: a stream's next frames go to later batches while one waits in its batch. Checked
against ``in-flight=1``, the reference: every frame of every stream leaves once, in order, with the same boxes,
track ids and producers (pytracker tracking in the batch, frames skipped by ``interval`` in between); a stream
really has several frames in the group at once, never two in one batch; a failing batch is an error, not a hang.
Real pipelines, a real detector that flickers (``FlickerDetector``) and real trackers."""
from __future__ import annotations

from typing import Any

import gi
import pytest
from gst_helpers import RunResult, run_pipeline
from scenes import feed, frame_index

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream import batching
from inferstream.meta.gstanalytics import read_detections

SIZE = (320, 240)
FLICKER = "model=test_pytracker_in_batch:flicker_detector labels=a,b,c confidence-threshold=0.1"

pytestmark = pytest.mark.pipeline


def _left(buf: Gst.Buffer) -> tuple[int, list[int], list[list[float]], list[int]]:
    meta = read_detections(buf)
    if meta is None:
        return frame_index(buf), [], [], []
    ids = meta.dets.track_ids.tolist() if meta.dets.track_ids is not None else [-1] * len(meta.dets)
    return frame_index(buf), ids, meta.dets.boxes_xyxy.tolist(), list(meta.producers)


def _play(tag: str, in_flight: int, interval: int = 0, streams: int = 4, frames: int = 40,
          batch: int | None = None) -> RunResult:
    chains = [f"appsrc name=src{k} ! videoconvert ! video/x-raw,format=RGB ! pyinfer {FLICKER} "
              f"model-family=yolo-end2end input-size=320 batch-group={tag} batch-size={batch or streams} "
              f"max-latency=200 interval={interval} in-flight={in_flight} ! pytracker name=trk{k} "
              f"first-id={1000 * k} output-lost-tracks=true unique-id=77 ! fakesink sync=false"
              for k in range(streams)]

    def start(pipeline: Gst.Pipeline) -> None:
        for k in range(streams):
            feed(pipeline.get_by_name(f"src{k}"), k, frames, *SIZE)

    return run_pipeline("  ".join(chains), {f"trk{k}": _left for k in range(streams)}, timeout_s=120,
                        before_play=start)


def _outcome(result: RunResult) -> dict[str, list[Any]]:
    assert result.eos and not result.errors, result.errors
    return result.seen


@pytest.fixture
def in_group(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The most frames one stream had in its batch group at once, and the most of one stream in one batch."""
    most = {"held": 0, "in_one_batch": 0}
    held: dict[int, list[batching.Pending]] = {}
    submit, run = batching.BatchGroup.submit, batching.BatchGroup._run

    def spy_submit(self: batching.BatchGroup, job: Any, params: Any, member: Any = None) -> batching.Pending:
        mine = [p for p in held.get(id(member), []) if not p.done]  # the stream's frames still in the group
        most["held"] = max(most["held"], len(mine) + 1)
        pending = submit(self, job, params, member)
        held[id(member)] = [*mine, pending]
        return pending

    def spy_run(self: batching.BatchGroup, batch: list[batching.Pending]) -> None:
        per_member: dict[int, int] = {}
        for p in batch:
            per_member[id(p.member)] = per_member.get(id(p.member), 0) + 1
        most["in_one_batch"] = max(most["in_one_batch"], *per_member.values())
        run(self, batch)

    monkeypatch.setattr(batching.BatchGroup, "submit", spy_submit)
    monkeypatch.setattr(batching.BatchGroup, "_run", spy_run)
    return most


@pytest.mark.parametrize(("in_flight", "interval"), [(2, 0), (3, 0), (3, 1)],
                         ids=["two", "three", "three-every-other-frame"])
def test_frames_in_flight_leave_in_order_with_the_tracks_of_one_at_a_time(in_group: dict[str, int],
                                                                          in_flight: int, interval: int) -> None:
    ahead = _outcome(_play(f"ahead{in_flight}{interval}", in_flight, interval))
    if not interval:  # a skipped frame is tracked before the next frame goes to a batch: it ends the overlap
        assert in_group["held"] >= 2, "no stream ever had two frames in its batch group: nothing was in flight"
    assert in_group["in_one_batch"] == 1, "a batch held two frames of one stream"
    reference = _outcome(_play(f"one{in_flight}{interval}", 1, interval))
    for k in range(4):
        frames = ahead[f"trk{k}"]
        assert [f[0] for f in frames] == list(range(40)), f"stream {k} lost or reordered frames"
        assert any(f[1] for f in frames), f"stream {k}: nothing tracked, nothing compared"
    assert ahead == reference  # boxes, track ids and producers, frame by frame


def test_a_batch_smaller_than_the_streams_with_frames_in_flight() -> None:
    """Four streams in batches of two: a stream's next frame may join a batch of other streams' older frames."""
    ahead = _outcome(_play("small-ahead", 2, batch=2))
    reference = _outcome(_play("small-one", 1, batch=2))
    assert ahead == reference
    assert all([f[0] for f in ahead[f"trk{k}"]] == list(range(40)) for k in range(4))


def test_a_failing_batch_with_frames_in_flight_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferstream.inference import ModelStep

    prepare, calls = ModelStep.prepare, []

    def fail_on_the_fifth(self: ModelStep, frames: Any, params: Any = None, collect: bool = False) -> Any:
        calls.append(len(frames))  # the batch group's entry
        if len(calls) == 5:
            raise RuntimeError("device lost")
        return prepare(self, frames, params, collect)

    monkeypatch.setattr(ModelStep, "prepare", fail_on_the_fifth)
    result = _play("failing", 2)
    assert result.errors and "inference failed" in result.errors[0] and "device lost" in result.errors[0]


def test_a_flushing_seek_with_frames_in_flight_drops_them_and_starts_again() -> None:
    """Two streams with three frames each in flight; stream 0 seeks back to its start at its frame 12: the frames
    held then are dropped, the stream plays again from 0 to EOS, every frame out carries pyinfer's detections."""
    sought: list[bool] = []

    def seek_once(pipeline: Gst.Pipeline, msg: Gst.Message) -> None:
        if msg.type == Gst.MessageType.ELEMENT and msg.get_structure().get_name() == "seek-now" and not sought:
            sought.append(True)
            pipeline.get_by_name("src0").seek_simple(Gst.Format.TIME, Gst.SeekFlags.FLUSH, 0)

    def out(buf: Gst.Buffer) -> tuple[int, bool]:
        index = round(buf.pts * 10 / Gst.SECOND)
        if index == 12 and not sought:
            sink = pipeline_ref[0].get_by_name("out0")
            sink.post_message(Gst.Message.new_element(sink, Gst.Structure.new_empty("seek-now")))
        return index, read_detections(buf) is not None

    pipeline_ref: list[Gst.Pipeline] = []
    chains = [f"videotestsrc name=src{k} num-buffers=30 pattern=smpte ! video/x-raw,width=160,height=120,"
              f"framerate=10/1 ! videoconvert ! video/x-raw,format=RGB ! pyinfer model=blobs:color_blob_detector "
              f"model-family=yolo-end2end labels=red,green,blue input-size=160 batch-group=seek batch-size=2 "
              f"in-flight=3 ! identity name=out{k} ! fakesink sync=false" for k in range(2)]
    result = run_pipeline("  ".join(chains), {"out0": out, "out1": lambda buf: buf.pts}, timeout_s=60,
                          on_message=seek_once, before_play=pipeline_ref.append)
    assert result.eos and not result.errors, result.errors
    assert sought, "the seek never happened"
    frames = [i for i, _ in result.seen["out0"]]
    restart = next(n for n in range(1, len(frames)) if frames[n] < frames[n - 1])
    # videotestsrc's num-buffers counts every buffer it made, those the flush dropped included
    assert restart >= 12 and frames[:restart] == list(range(restart)), frames
    assert frames[restart:] == list(range(len(frames) - restart)) and len(frames) <= 30, frames
    assert all(has_meta for _, has_meta in result.seen["out0"])
    assert len(result.seen["out1"]) == 30
