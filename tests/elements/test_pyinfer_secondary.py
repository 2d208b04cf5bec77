"""Secondary pyinfer (process-mode=secondary) in real pipelines on vtest.avi: the real person detector's boxes
classified by a torchvision ResNet-18 (seeded random weights), checked against the same model run on crops made
independently (numpy slice of the frame + torchvision's resize and normalize)."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import gi
import numpy as np
import pytest
import torch
from classifier_models import LABELS, Counting, resnet18_seeded

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import Gst, GstAnalytics
from gst_helpers import run_pipeline

from inferstream.meta.classifications import read_classifications
from inferstream.meta.gstanalytics import read_detections

SIZE = 64  # the classifier's input (small: the suite runs on two CPU cores)
CLASSIFIER = f"model=classifier_models:resnet18_seeded labels={','.join(LABELS)} input-size={SIZE}"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
NOISE = 1e-4  # float noise bound on a probability (measured differences are ~1e-6); margins are checked above it


def _source(vtest: Path) -> str:
    return f"filesrc location={vtest} ! decodebin ! videoconvert ! video/x-raw,format=RGB "


def _frame_and_objects(buf: Gst.Buffer) -> tuple[np.ndarray, list[tuple[tuple[float, ...], str, int, int, Any]]]:
    """The RGB frame (a copy) and, per object: box, label, producer, track id, classifications."""
    ok, info = buf.map(Gst.MapFlags.READ)
    assert ok
    try:
        frame = np.frombuffer(info.data, np.uint8).reshape(576, 768, 3).copy()
    finally:
        buf.unmap(info)
    meta = read_detections(buf)
    if meta is None:
        return frame, []
    classes = read_classifications(buf, meta.od_ids)
    tracks = meta.dets.track_ids.tolist() if meta.dets.track_ids is not None else [-1] * len(meta.od_ids)
    return frame, [(tuple(box), meta.label_names[label], producer, track, cls) for box, label, producer, track, cls
                   in zip(meta.dets.boxes_xyxy.tolist(), meta.dets.labels.tolist(), meta.producers, tracks, classes)]


def _reference_probs(frames_boxes: list[tuple[np.ndarray, tuple[float, ...]]]) -> torch.Tensor:
    """The classifier on crops made without inferstream: slice, torchvision resize (bilinear, no antialias), norm."""
    from torchvision.transforms import functional as F

    crops = []
    for frame, (x1, y1, x2, y2) in frames_boxes:
        crop = torch.from_numpy(frame[int(y1):int(y2), int(x1):int(x2)]).permute(2, 0, 1).float() / 255
        crops.append(F.normalize(F.resize(crop, [SIZE, SIZE], antialias=False), MEAN, STD))
    with torch.no_grad():
        return resnet18_seeded()(torch.stack(crops)).softmax(1)


def test_two_stage_classifies_every_selected_object_once_as_the_reference(vtest: Path, person_onnx: Path) -> None:
    """Producer 1 (the person detector: Normal / Fall) and 2 (the same detector relabelled walker / faller) feed
    two secondaries: 3 operates on producer 1 only, 4 on the label Normal of any producer, objects >= 0x85 px."""
    frames = 8
    desc = (_source(vtest) + f"! pyinfer model={person_onnx} unique-id=1 "
            f"! pyinfer model={person_onnx} unique-id=2 labels=walker,faller confidence-threshold=0.4 "
            f"! pyinfer process-mode=secondary {CLASSIFIER} unique-id=3 operate-on-unique-id=1 batch-size=4 "
            f"! pyinfer process-mode=secondary {CLASSIFIER} unique-id=4 operate-on-classes=Normal "
            f"min-object-size=0x85 ! identity name=out eos-after={frames + 1} ! fakesink")
    result = run_pipeline(desc, {"out": _frame_and_objects}, timeout_s=300)
    assert not result.errors and len(result.seen["out"]) == frames
    objects = [(frame, obj) for frame, objs in result.seen["out"] for obj in objs]
    ours = [obj for _, obj in objects if obj[2] == 1]
    assert len(ours) >= 3 * frames and any(obj[2] == 2 for _, obj in objects)
    by_size = {True: 0, False: 0}
    for _, (box, label, producer, _track, cls) in objects:
        by = defaultdict(list)
        for c in cls:
            by[c.producer].append(c)
        expected = {3} if producer == 1 else set()
        if label == "Normal":
            by_size[box[3] - box[1] >= 85] += 1
            if box[3] - box[1] >= 85:
                expected.add(4)
        assert set(by) == expected, (box, label, producer, cls)
        assert all(len(v) == 1 for v in by.values())  # exactly one ClsMtd per classifier and object
        assert all(c.kind == f"classifier{c.producer}" for c in cls)
    assert by_size[True] and by_size[False]  # both sides of min-object-size were seen
    # parity of producer 3's results with the reference, on every crop
    ref = _reference_probs([(frame, obj[0]) for frame, obj in objects if obj[2] == 1])
    top2 = ref.topk(2, dim=1)
    ours3 = [next(c for c in obj[4] if c.producer == 3) for obj in ours]
    assert (top2.values[:, 0] - top2.values[:, 1] > NOISE).all(), "a crop too close to call: choose another seed"
    assert [c.label for c in ours3] == [LABELS[i] for i in top2.indices[:, 0].tolist()]
    torch.testing.assert_close(torch.tensor([c.confidence for c in ours3]), top2.values[:, 0], atol=NOISE, rtol=0)
    assert len({c.label for c in ours3}) >= 3  # the classifier tells pedestrians apart (not one constant class)


def _tracked_run(vtest: Path, person_onnx: Path, interval: int, frames: int) -> tuple[list[Any], int]:
    Counting.rows.clear()
    desc = (_source(vtest) + f"! identity eos-after={frames + 1} ! pyinfer model={person_onnx} ! pytracker "
            f"! pyinfer process-mode=secondary model=classifier_models:counting labels={','.join(LABELS)} "
            f"input-size={SIZE} reinfer-interval={interval} ! identity name=out ! fakesink")
    result = run_pipeline(desc, {"out": lambda buf: _frame_and_objects(buf)[1]}, timeout_s=300)
    assert not result.errors and len(result.seen["out"]) == frames
    return result.seen["out"], sum(Counting.rows)


def test_reinfer_interval_reuses_a_tracks_result_and_spares_the_model(vtest: Path, person_onnx: Path) -> None:
    interval, frames = 4, 12
    seen, calls = _tracked_run(vtest, person_onnx, interval, frames)
    # the rule, simulated on the tracks read back: a track is classified when new, absent the frame before, or
    # `interval` frames after its last classification; otherwise its last result is re-attached unchanged
    expected, last = 0, {}
    for objs in seen:
        present = {track for _, _, _, track, _ in objs}
        last = {t: v for t, v in last.items() if t in present}
        for _, _, _, track, cls in objs:
            assert len(cls) == 1
            result = (cls[0].label, cls[0].confidence)
            if track < 0 or track not in last or last[track][0] >= interval:
                expected += 1
                last[track] = (1, result)
            else:
                assert result == last[track][1]  # the cached result, re-attached
                last[track] = (last[track][0] + 1, result)
    total = sum(len(objs) for objs in seen)
    assert calls == expected < total, (calls, expected, total)


def test_reinfer_interval_0_classifies_every_object_every_frame(vtest: Path, person_onnx: Path) -> None:
    seen, calls = _tracked_run(vtest, person_onnx, 0, 4)
    assert calls == sum(len(objs) for objs in seen) > 0


def test_secondary_without_upstream_detections_passes_frames_unchanged() -> None:
    desc = ("videotestsrc num-buffers=5 ! video/x-raw,format=RGB,width=160,height=120 "
            f"! pyinfer name=s process-mode=secondary {CLASSIFIER} ! fakesink")
    result = run_pipeline(desc, {"s": lambda buf: buf.get_n_meta(GstAnalytics.relation_meta_api_get_type())})
    assert result.eos and not result.errors and not result.warnings
    assert result.seen["s"] == [0] * 5


@pytest.mark.parametrize(("props", "message"), [
    (f"model=classifier_models:resnet18_seeded labels=a,b,c input-size={SIZE}", r"3 labels .*\(1, 8\).* 8 classes"),
    ("model=blobs:color_blob_detector model-family=yolo-end2end", "needs a classifier"),
    (f"{CLASSIFIER} min-object-size=tall", "min-object-size 'tall'"),
    (f"{CLASSIFIER} std=1,2", "std '1,2': expected three numbers"),  # one value (all channels) or three
])
def test_secondary_bad_settings_are_one_clear_error_at_start(props: str, message: str) -> None:
    result = run_pipeline(f"videotestsrc num-buffers=2 ! video/x-raw,format=RGB,width=64,height=64 "
                          f"! pyinfer process-mode=secondary {props} ! fakesink", timeout_s=60)
    assert len(result.errors) == 1 and not result.eos
    assert re.search(message, result.errors[0]), result.errors[0]


def test_classifications_reach_pymsgconv_payloads(vtest: Path, person_onnx: Path) -> None:
    import json

    from inferstream.meta.payload import read_payloads

    desc = (_source(vtest) + f"! identity eos-after=4 ! pyinfer model={person_onnx} "
            f"! pyinfer process-mode=secondary {CLASSIFIER} unique-id=5 classifier-type=kind "
            "! pymsgconv name=conv schema=deepstream-full ! fakesink")
    result = run_pipeline(desc, {"conv": read_payloads}, timeout_s=120)
    assert not result.errors
    docs = [json.loads(p) for metas in result.seen["conv"] for m in metas for p in m.payloads]
    assert len(docs) >= 3
    kinds = [v for doc in docs for v in doc["object"].values() if isinstance(v, dict) and "confidence" in v]
    assert len(kinds) == len(docs) and all(k["kind"] in LABELS for k in kinds)  # the label's sub-object


def test_pyosd_draws_the_classification_after_the_detectors_label() -> None:
    def pixels(buf: Gst.Buffer) -> np.ndarray:
        ok, info = buf.map(Gst.MapFlags.READ)
        assert ok
        try:
            return np.frombuffer(info.data, np.uint8).reshape(240, 320, 3).copy()
        finally:
            buf.unmap(info)

    base = ("videotestsrc pattern=smpte num-buffers=1 ! video/x-raw,format=RGB,width=320,height=240 "
            "! pyinfer model=blobs:color_blob_detector model-family=yolo-end2end labels=red,green,blue ")
    tail = "! pyosd ! identity name=o ! fakesink"
    plain = run_pipeline(base + tail, {"o": pixels})
    classified = run_pipeline(base + f"! pyinfer process-mode=secondary {CLASSIFIER} " + tail, {"o": pixels})
    assert not plain.errors and not classified.errors
    changed = (plain.seen["o"][0] != classified.seen["o"][0]).any(-1)
    assert changed.sum() > 20  # the extra label text; boxes are the same


def test_a_classifier_as_primary_labels_the_whole_frame() -> None:
    result = run_pipeline("videotestsrc pattern=ball num-buffers=3 ! video/x-raw,format=RGB,width=200,height=150 "
                          f"! pyinfer name=p {CLASSIFIER} confidence-threshold=0 ! fakesink",
                          {"p": lambda buf: read_detections(buf)})
    assert not result.errors and len(result.seen["p"]) == 3
    for meta in result.seen["p"]:
        assert meta.dets.boxes_xyxy.tolist() == [[0.0, 0.0, 200.0, 150.0]] and meta.label_names[0] in LABELS
