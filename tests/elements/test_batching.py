"""Several pyinfer instances in one batch-group: one model, frames of several streams per batch, each stream gets
exactly its own detections back; an early EOS never stalls the others; models swap while playing without losing
or duplicating a frame."""
from __future__ import annotations

import json
from pathlib import Path

import gi
import pytest
from gst_helpers import run_pipeline
from scenes import SQUARE, feed, frame_index, red_square_position

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.meta.gstanalytics import read_detections

LABELS = "red,green,blue,red-b,green-b,blue-b,red-c,green-c,blue-c"
STREAMS = [(0, 320, 240, "RGB"), (1, 400, 300, "BGRx"), (2, 256, 256, "NV12"), (3, 352, 288, "I420")]


def _branch(k: int, w: int, h: int, fmt: str, extra: str = "", batch: int = 4) -> str:
    return (f"appsrc name=src{k} ! videoconvert ! video/x-raw,format={fmt} ! pyinfer name=inf{k} "
            f"model=blobs:color_blob_detector model-family=yolo-end2end labels={LABELS} batch-group=g{batch} "
            f"batch-size={batch} max-latency=200 input-size=320 {extra} ! fakesink sync=false ")


def _red_box(buf: Gst.Buffer) -> tuple[int, list[float] | None, int]:
    meta = read_detections(buf)
    assert meta is not None, "a frame without analytics meta"
    red = [b for b, lab in zip(meta.dets.boxes_xyxy.tolist(), meta.dets.labels.tolist())
           if meta.label_names[lab] == "red"]
    return frame_index(buf), red[0] if red else None, len(meta.dets)


def _feed_all(frames: dict[int, int]):
    def start(pipeline: Gst.Pipeline) -> None:
        for k, w, h, _ in STREAMS:
            feed(pipeline.get_by_name(f"src{k}"), k, frames[k], w, h)
    return start


@pytest.mark.parametrize(("frames", "batch"), [({0: 40, 1: 40, 2: 40, 3: 40}, 4), ({0: 8, 1: 40, 2: 40, 3: 40}, 4),
                                               ({0: 40, 1: 40, 2: 40, 3: 40}, 2)],
                         ids=["equal", "stream0-ends-early", "two-batches-in-flight"])
def test_batch_group_keeps_each_streams_boxes_on_its_stream(frames: dict[int, int], batch: int) -> None:
    desc = " ".join(_branch(k, w, h, fmt, batch=batch) for k, w, h, fmt in STREAMS)
    stats: list[dict] = []
    result = run_pipeline(desc, {f"inf{k}": _red_box for k, *_ in STREAMS}, timeout_s=120,
                          before_play=_feed_all(frames),
                          on_message=lambda p, m: stats.append(json.loads(p.get_by_name("inf1").get_property("stats")))
                          if m.type == Gst.MessageType.EOS else None)
    assert result.eos and not result.errors, result.errors
    for k, w, h, _ in STREAMS:
        seen = result.seen[f"inf{k}"]
        assert [i for i, _, _ in seen] == list(range(frames[k])), f"stream {k} lost or reordered frames"
        for i, box, _ in seen:
            x, y = red_square_position(k, i, w, h)
            assert box is not None, f"stream {k} frame {i}: red square not found"
            assert abs(box[0] - x) <= 2 and abs(box[1] - y) <= 2 and abs(box[2] - (x + SQUARE)) <= 2, \
                f"stream {k} frame {i}: box {box} is not this stream's square at {(x, y)}"
    assert stats and stats[-1]["frames"] == sum(frames.values())
    assert stats[-1]["mean-fill"] > 1.5, stats[-1]


def test_batch_group_rejects_a_member_with_another_model() -> None:
    desc = (_branch(0, 320, 240, "RGB") + _branch(1, 320, 240, "RGB").replace("blobs:color_blob_detector",
                                                                              "blobs:shifted_blob_detector"))
    result = run_pipeline(desc, timeout_s=60, before_play=lambda p: [feed(p.get_by_name(f"src{k}"), k, 2, 320, 240)
                                                                      for k in (0, 1)])
    assert result.errors
    assert "blobs:color_blob_detector" in result.errors[0] and "blobs:shifted_blob_detector" in result.errors[0]


# ----------------------------------------------------------------------------------------------- hot swap --
def _model_of(buf: Gst.Buffer) -> tuple[int, str]:
    meta = read_detections(buf)
    assert meta is not None and len(meta.dets) > 0, "a frame without detections"
    names = {meta.label_names[lab] for lab in meta.dets.labels.tolist()}
    model = "A" if names <= {"red", "green", "blue"} else "B" if names <= {"red-b", "green-b", "blue-b"} else "C"
    return frame_index(buf), model


def _swap_run(requests: list[str], at: int = 300, frames: int = 600) -> tuple[list[tuple[int, str]], object, str]:
    """Frames (index, model A/B/C) seen after swapping to ``requests`` at frame ``at``, the run, and what the
    ``model`` property reads at the end."""
    desc = ("appsrc name=src0 ! pyinfer name=inf0 model=blobs:color_blob_detector model-family=yolo-end2end "
            f"labels={LABELS} input-size=160 ! identity name=out ! fakesink sync=false")
    issued: list[bool] = []

    def maybe_swap(buf: Gst.Buffer) -> tuple[int, str]:
        if frame_index(buf) == at and not issued:
            issued.append(True)
            inf = pipeline_ref[0].get_by_name("inf0")
            for model in requests:
                inf.set_property("model", model)
        return _model_of(buf)

    pipeline_ref: list[Gst.Pipeline] = []

    def start(pipeline: Gst.Pipeline) -> None:
        pipeline_ref.append(pipeline)
        feed(pipeline.get_by_name("src0"), 0, frames, 96, 64)

    result = run_pipeline(desc, {"out": maybe_swap}, timeout_s=180, before_play=start)
    return result.seen["out"], result, pipeline_ref[0].get_by_name("inf0").get_property("model")


def test_hot_swap_every_frame_inferred_by_exactly_one_model() -> None:
    seen, result, model = _swap_run(["blobs:shifted_blob_detector"])
    assert result.eos and not result.errors and model == "blobs:shifted_blob_detector"
    assert [i for i, _ in seen] == list(range(600)), "frames lost, duplicated or reordered"
    models = [m for _, m in seen]
    switch = models.index("B")
    assert set(models[:switch]) == {"A"} and set(models[switch:]) == {"B"}, "the switch is not monotonic"
    assert 300 <= switch < 600
    swapped = [s for s in result.elements if s.get_name() == "inferstream/model-swapped"]
    assert len(swapped) == 1
    assert swapped[0].get_value("old-model") == "blobs:color_blob_detector"
    assert swapped[0].get_value("new-model") == "blobs:shifted_blob_detector"


def test_hot_swap_to_a_broken_model_keeps_the_old_one_and_warns(tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x00garbage" * 64)
    seen, result, model = _swap_run([str(broken)])
    assert result.eos and not result.errors
    assert {m for _, m in seen} == {"A"} and len(seen) == 600
    assert any("broken.onnx" in w for w in result.warnings)
    assert model == "blobs:color_blob_detector"  # the property reads the model that runs, not the one that failed


def test_hot_swap_to_a_model_failing_on_real_frames_rolls_back() -> None:
    """It passes warm-up, so it is swapped in; its first real batch fails: the old model infers that batch and
    goes on, nothing is lost and the pipeline does not stop."""
    seen, result, model = _swap_run(["blobs:fails_after_warmup"])
    assert result.eos and not result.errors
    assert [i for i, _ in seen] == list(range(600)) and {m for _, m in seen} == {"A"}
    assert any("fails_after_warmup" in w and "rolled back" in w for w in result.warnings), result.warnings
    assert model == "blobs:color_blob_detector"


def test_hot_swap_newer_request_wins_and_older_is_reported() -> None:
    seen, result, _model = _swap_run(["blobs:shifted_blob_detector", "blobs:third_blob_detector"])
    assert result.eos and not result.errors
    models = [m for _, m in seen]
    assert "B" not in models and models[-1] == "C" and len(seen) == 600
    assert any("cancelled" in w and "shifted_blob_detector" in w for w in result.warnings)
