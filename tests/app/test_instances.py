"""``infer.instances: N``: the streams of a process dealt round-robin over N batch-groups, each with its own copy of
the model. Checked against one instance, the reference: the same detections on every frame of every stream, and
no frame in another stream's group."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.media import BLOBS, CLIP_FRAMES
from inferstream.app import api
from inferstream.app.config import load_config
from inferstream.app.pipeline import BATCH_GROUP, build_plan

pytestmark = pytest.mark.pipeline


def _config(clips: list[Path], instances: int) -> dict[str, Any]:
    return {"sources": [{"id": f"cam{i}", "file": str(p)} for i, p in enumerate(clips)],
            "infer": {**BLOBS, "instances": instances}, "tracker": {}}


def test_instances_deal_the_streams_round_robin_with_their_share_as_batch() -> None:
    cfg = load_config({"sources": [{"test": "smpte", "num-buffers": 1}] * 5, "infer": {**BLOBS, "instances": 2}})
    plan = build_plan(cfg)
    assert [s.group for s in plan.streams] == [f"{BATCH_GROUP}-{k}" for k in (0, 1, 0, 1, 0)]
    assert [f"batch-group={s.group}" in s.description for s in plan.streams] == [True] * 5
    assert ["batch-size=3" in s.description for s in plan.streams] == [True, False, True, False, True]
    assert ["batch-size=2" in s.description for s in plan.streams] == [False, True, False, True, False]
    one = build_plan(load_config({"sources": [{"test": "smpte", "num-buffers": 1}] * 2, "infer": BLOBS}))
    assert {s.group for s in one.streams} == {BATCH_GROUP}  # the default: one group, its name unchanged
    few = build_plan(load_config({"sources": [{"test": "smpte", "num-buffers": 1}], "infer": {**BLOBS,
                                                                                               "instances": 4}}))
    assert [s.group for s in few.streams] == [f"{BATCH_GROUP}-0"]  # no more groups than streams


def test_default_batch_on_cuda_is_two_halves_from_sixteen_streams() -> None:
    def batches(n: int, device: str, instances: int = 1) -> set[str]:
        cfg = load_config({"sources": [{"test": "smpte", "num-buffers": 1}] * n,
                           "infer": {**BLOBS, "device": device, "instances": instances}})
        return {d.split("batch-size=")[1].split()[0] for d in (s.description for s in build_plan(cfg).streams)}

    assert batches(16, "cuda") == {"8"} and batches(17, "cuda:0") == {"9"}  # two batches in flight
    assert batches(15, "cuda") == {"15"} and batches(32, "cpu") == {"32"}  # whole: few streams, or the CPU
    assert batches(32, "cuda", instances=2) == {"8"}  # each group's share of 16, halved
    ahead = load_config({"sources": [{"test": "smpte", "num-buffers": 1}] * 16,
                         "infer": {**BLOBS, "device": "cuda", "in-flight": 2}})
    assert {"batch-size=16" in s.description for s in build_plan(ahead).streams} == {True}  # whole, frames ahead
    given = load_config({"sources": [{"test": "smpte", "num-buffers": 1}] * 16,
                         "infer": {**BLOBS, "device": "cuda", "batch-size": 16}})
    assert {"batch-size=16" in s.description for s in build_plan(given).streams} == {True}  # the config's wins


def test_instances_zero_is_a_config_error() -> None:
    from inferstream.app.config import ConfigFileError

    with pytest.raises(ConfigFileError, match="instances"):
        load_config({"sources": [{"test": "smpte"}], "infer": {**BLOBS, "instances": 0}})


def test_two_instances_detect_and_track_every_frame_as_one_does(clips: list[Path]) -> None:
    from inferstream.meta.gstanalytics import read_detections

    def record(into: dict[str, list[Any]]) -> Any:
        def hook(sid: str, index: int, buf: Any) -> None:
            meta = read_detections(buf)
            assert meta is not None, f"{sid} frame {index} has no analytics metadata"
            d = meta.dets
            into.setdefault(sid, []).append((index, d.boxes_xyxy.tolist(), d.labels.tolist(), d.track_ids.tolist()
                                             if d.track_ids is not None else None))
        return hook

    seen: dict[int, dict[str, list[Any]]] = {1: {}, 2: {}}
    batches: dict[int, dict[str, float]] = {}
    for n in (1, 2):
        result = api.run(_config(clips, n), frame_hooks=[record(seen[n])])
        assert result.exit_code == 0, result.errors
        assert result.frames == {f"cam{i}": f for i, f in enumerate(CLIP_FRAMES)}
        batches[n] = result.snapshot.batch
    for sid, frames in seen[2].items():
        assert [f[0] for f in frames] == list(range(len(frames)))  # every frame once, in order
        assert any(f[1] for f in frames), f"{sid}: no detections at all, nothing compared"
    assert seen[2] == seen[1]  # boxes, labels and track ids equal the one-instance run's, frame by frame
    # the summary's batch stats are both groups' merged: two groups of two streams, no batch above two frames
    assert batches[2]["batches"] > 0 and 1 <= batches[2]["mean-fill"] <= 2, batches
