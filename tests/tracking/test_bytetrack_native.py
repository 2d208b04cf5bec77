"""The compiled ByteTrack update (``bytetrack_native``, ``bytetrack.c``) against numpy's (``bytetrack_core.update``,
the reference): on the same frames of many streams, every result (ids, tracks, predicted boxes, ended ids,
malformed counts) and every stream's state (the Kalman states to the last bit) must be equal, over random
multi-stream sequences, flickering, oriented and malformed detections, the hard simulated scenes, frames the
detector skipped (numpy's ``predict_only`` on the compiled core's states) and every setting that changes a stage."""
from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import fields

import numpy as np
import pytest
import torch

from inferstream.detections import Detections
from inferstream.tracking import ByteTrack, KalmanNoise
from inferstream.tracking import bytetrack_core as core
from inferstream.tracking import bytetrack_native as native
from inferstream.tracking import matching as matching_module
from inferstream.tracking.bytetrack_core import StreamState
from inferstream.tracking.table import TrackTable

from .scenes import BounceConfig, SceneConfig, make_bounce_scene, make_scene
from .test_update_streams import FRAME_NS, assert_same_result, flicker, junky, oriented, steady

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")),
                                reason="no C compiler: ByteTrack runs on numpy alone (the reference)")

Scene = Callable[[int, int, torch.Generator], Detections]


def assert_same_states(got: list[StreamState], want: list[StreamState]) -> None:
    for g, w in zip(got, want, strict=True):
        assert (g.state_ns, g.now_ns, g.next_id, g.device, g.oriented) == (w.state_ns, w.now_ns, w.next_id,
                                                                           w.device, w.oriented)
        for f in fields(TrackTable):
            np.testing.assert_array_equal(getattr(g.tracks, f.name), getattr(w.tracks, f.name), err_msg=f.name)


def fresh(n_streams: int) -> list[StreamState]:
    return [StreamState(TrackTable.empty(), None, None, 1 + 1000 * s, torch.device("cpu"), False)
            for s in range(n_streams)]


def run_pair(tracker: ByteTrack, n_streams: int, frames: int, seed: int, scene: Scene, skipped: float = 0.1) -> int:
    """The same random batches through both cores: streams with their own box counts, pts offsets and time steps
    (0 included); some frames skipped by the detector (both sides: numpy's ``predict_only``). Asserts equality
    after every batch; returns how many confirmed tracks were reported."""
    assert native.available()
    rnd, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    cfg = tracker.settings
    compiled, reference = fresh(n_streams), fresh(n_streams)
    pts = [rnd.randrange(0, 10**10) for _ in range(n_streams)]
    boxes = [rnd.choice([0, 1, 5, 20, 31, 60]) for _ in range(n_streams)]
    reported = 0
    for frame in range(frames):
        for s in range(n_streams):
            pts[s] += rnd.choice([0, FRAME_NS, FRAME_NS, FRAME_NS, 2 * FRAME_NS, 17_000_001])
        if rnd.random() < skipped:
            compiled, got = core.predict_only(cfg, compiled, pts)
            reference, want = core.predict_only(cfg, reference, pts)
        else:
            dets = [scene(boxes[s], frame + 7 * s, gen) for s in range(n_streams)]
            compiled, got = native.update(cfg, compiled, dets, list(pts))
            reference, want = core.update(cfg, reference, dets, list(pts))
        for g, w in zip(got, want, strict=True):
            assert_same_result(g, w)
            reported += len(g.tracks)
        assert_same_states(compiled, reference)
    return reported


SETTINGS = {
    "default": ByteTrack(),
    "per_class": ByteTrack(per_class=True),
    "fuse_min_hits_1_short_life": ByteTrack(fuse_score=True, min_hits=1, max_lost_s=0.15, coast_s=0.1),
    "min_hits_3_new_track_0.8": ByteTrack(min_hits=3, new_track_score=0.8),
    "no_gate": ByteTrack(motion_gate=0.0),
    "no_recovery_no_grace": ByteTrack(recover_sigmas=0.0, gate_grace_s=0.0),
    "zero_thresholds": ByteTrack(match_iou=0.0, low_match_iou=0.0, tentative_match_iou=0.0, recover_iou=0.0,
                                 grace_iou=0.0),
    "tight_gate_loose_noise": ByteTrack(motion_gate=4.0, kalman_noise=KalmanNoise(velocity=8.0, min_size_px=10.0)),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("scene", [steady, flicker], ids=["steady", "flicker"])
def test_compiled_update_equals_numpys(name: str, scene: Scene) -> None:
    assert run_pair(SETTINGS[name], 6, 80, 11, scene) > 300


@pytest.mark.parametrize("name", ["default", "per_class", "fuse_min_hits_1_short_life"])
def test_compiled_update_equals_numpys_on_oriented_boxes(name: str) -> None:
    assert run_pair(SETTINGS[name], 5, 80, 5, oriented(flicker)) > 200


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy, on the NaNs
@pytest.mark.parametrize("scene", [junky(flicker), junky(oriented(flicker))], ids=["axis_aligned", "oriented"])
def test_compiled_update_equals_numpys_on_malformed_rows(scene: Scene) -> None:
    assert run_pair(SETTINGS["default"], 5, 60, 3, scene) > 100


def test_compiled_update_faces_the_same_conflicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenes above make candidates compete (numpy's side calls its solver), so the C solver is what decides
    those frames, and still gives numpy's matches."""
    solved: list[tuple[int, int]] = []
    solve = matching_module.match_pairs

    def counting(sim: np.ndarray, min_sim: float) -> tuple[np.ndarray, np.ndarray]:
        solved.append(sim.shape)
        return solve(sim, min_sim)

    monkeypatch.setattr(matching_module, "match_pairs", counting)
    run_pair(SETTINGS["default"], 6, 60, 2, flicker, skipped=0.0)
    assert sum(1 for r, c in solved if r > 1 and c > 1) >= 10


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (runs on the GPU machine, see bench/gpu)")
def test_compiled_update_equals_numpys_on_cuda_detections() -> None:
    """Detections in CUDA memory: both cores copy them to the host once and give results back on the device."""
    def on_cuda(n: int, frame: int, gen: torch.Generator) -> Detections:
        return flicker(n, frame, gen).to("cuda")

    assert run_pair(SETTINGS["default"], 4, 40, 1, on_cuda) > 100


def _scene_frames(kind: str, seed: int) -> list[tuple[int, Detections]]:
    if kind == "bounce":
        return [(f.pts_ns, f.detections) for f in make_bounce_scene(seed, BounceConfig()).frames]
    config = SceneConfig(n_objects=14, n_classes=3, oriented=kind == "oriented")
    return [(f.pts_ns, f.detections) for f in make_scene(seed, config).frames]


@pytest.mark.parametrize("kind", ["crossing", "oriented", "bounce"])
def test_compiled_update_equals_numpys_on_the_hard_scenes(kind: str) -> None:
    """The tracking benchmark's simulated scenes (crossings, occlusions, bursts of misses, bounces), three seeds at
    once as three streams of one batch each frame."""
    streams = [_scene_frames(kind, seed) for seed in range(3)]
    cfg = ByteTrack(per_class=kind == "crossing").settings
    compiled, reference = fresh(3), fresh(3)
    ids_seen = 0
    for frame in zip(*streams):
        pts, dets = [p for p, _ in frame], [d for _, d in frame]
        compiled, got = native.update(cfg, compiled, dets, pts)
        reference, want = core.update(cfg, reference, dets, pts)
        for g, w in zip(got, want, strict=True):
            assert_same_result(g, w)
            ids_seen += int((g.detections.track_ids >= 0).sum())
        assert_same_states(compiled, reference)
    assert ids_seen > 1000


def test_without_a_compiler_update_is_numpys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_lib", lambda: None)
    gen = torch.Generator().manual_seed(0)
    cfg = ByteTrack().settings
    a, b = fresh(2), fresh(2)
    for i in range(20):
        dets = [flicker(20, i, gen) for _ in range(2)]
        a, got = native.update(cfg, a, dets, [i * FRAME_NS] * 2)
        b, want = core.update(cfg, b, dets, [i * FRAME_NS] * 2)
        for g, w in zip(got, want, strict=True):
            assert_same_result(g, w)


def test_an_install_without_the_c_source_tracks_on_numpy(monkeypatch: pytest.MonkeyPatch, tmp_path: object,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    native._lib.cache_clear()
    monkeypatch.setattr(native, "__file__", str(tmp_path) + "/bytetrack_native.py")
    try:
        assert not native.available()
        assert "ByteTrack runs on numpy" in caplog.text and "bytetrack.c" in caplog.text
        tracker = ByteTrack()
        gen = torch.Generator().manual_seed(0)
        assert len(tracker.update(flicker(20, 0, gen), 0).detections) > 0
    finally:
        native._lib.cache_clear()
