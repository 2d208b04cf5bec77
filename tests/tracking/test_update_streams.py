"""``update_streams`` (tracking/bytetrack.py, bytetrack_core.py) gives exactly what updating each stream's tracker in
turn gives: the reference is ``ByteTrack.update`` / ``predict_only`` on a twin tracker, frame after frame."""
from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import fields

import numpy as np
import pytest
import torch

from inferstream.detections import Detections
from inferstream.tracking import ByteTrack, TrackResult, bytetrack_native, update_streams
from inferstream.tracking import matching as matching_module

FRAME_NS = 33_333_333
SIZE = (60.0, 80.0)


def steady(n: int, frame: int, gen: torch.Generator) -> Detections:
    """``n`` boxes on a grid, 10 per row, each moving 2 px per frame, found every frame (score 0.8)."""
    idx = torch.arange(n, dtype=torch.float32)
    xy = torch.stack([(idx % 10) * 120.0, (idx // 10) * 100.0], dim=1) + 10.0 + 2.0 * frame
    return Detections(boxes_xyxy=torch.cat([xy, xy + torch.tensor(SIZE)], dim=1), scores=torch.full((n,), 0.8),
                      labels=torch.zeros(n, dtype=torch.int64))


def flicker(n: int, frame: int, gen: torch.Generator) -> Detections:
    """``steady`` with a fifth of the boxes missed, ±6 px of jitter, scores in [0.2, 0.9] and false positives (as
    bench/_tracking_scene.flicker_frame), and labels 0-2 (for per-class matching)."""
    grid = steady(n, frame, gen)
    kept = torch.rand(n, generator=gen) >= 0.2
    boxes = grid.boxes_xyxy[kept] + (torch.rand(int(kept.sum()), 4, generator=gen) - 0.5) * 12
    xy = torch.rand(n // 10 + 1, 2, generator=gen) * torch.tensor([1200.0, 1000.0])
    boxes = torch.cat([boxes, torch.cat([xy, xy + torch.tensor(SIZE)], dim=1)])
    labels = torch.randint(0, 3, (len(boxes),), generator=gen)
    return Detections(boxes_xyxy=boxes, scores=0.2 + 0.7 * torch.rand(len(boxes), generator=gen), labels=labels)


def oriented(scene: Callable[[int, int, torch.Generator], Detections]) -> Callable[..., Detections]:
    def frame(n: int, i: int, gen: torch.Generator) -> Detections:
        d = scene(n, i, gen)
        return Detections(d.boxes_xyxy, d.scores, d.labels, angles_rad=(torch.rand(len(d), generator=gen) - 0.5) * 3)
    return frame


def junky(scene: Callable[[int, int, torch.Generator], Detections]) -> Callable[..., Detections]:
    """``scene`` with about a tenth of its rows made malformed: a NaN or infinite edge, a negative width, a NaN
    score, or (oriented) a NaN angle."""
    def frame(n: int, i: int, gen: torch.Generator) -> Detections:
        d = scene(n, i, gen)
        boxes, scores = d.boxes_xyxy.clone(), d.scores.clone()
        angles = None if d.angles_rad is None else d.angles_rad.clone()
        kind = torch.randint(0, 10, (len(d),), generator=gen)
        boxes[kind == 0, 2] = float("nan")
        boxes[kind == 1, 0] = float("-inf")
        boxes[kind == 2, 2] = boxes[kind == 2, 0] - 5.0
        scores[kind == 3] = float("nan")
        if angles is not None:
            angles[kind == 4] = float("nan")
        return Detections(boxes, scores, d.labels, angles_rad=angles)
    return frame


def assert_same_detections(a: Detections, b: Detections) -> None:
    for f in fields(Detections):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert (x is None) == (y is None), f.name
        if x is not None:
            assert x.device == y.device, f.name
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=f.name)  # the input rows: NaN too


def assert_same_result(got: TrackResult, want: TrackResult) -> None:
    assert got.tracks == want.tracks
    assert got.ended_ids == want.ended_ids
    assert got.malformed == want.malformed
    assert_same_detections(got.detections, want.detections)
    assert_same_detections(got.predicted, want.predicted)


def assert_same_state(got: ByteTrack, want: ByteTrack) -> None:
    g, w = got._state, want._state
    assert (g.state_ns, g.now_ns, g.next_id, g.device, g.oriented) == (w.state_ns, w.now_ns, w.next_id, w.device,
                                                                       w.oriented)
    for f in fields(g.tracks):
        np.testing.assert_array_equal(getattr(g.tracks, f.name), getattr(w.tracks, f.name), err_msg=f.name)


def run_both(make: Callable[[int], ByteTrack], n_streams: int, frames: int, seed: int,
             scene: Callable[[int, int, torch.Generator], Detections], absent: float = 0.1,
             skipped: float = 0.1) -> int:
    """Feed the same random multi-stream sequence to ``update_streams`` and to twin trackers one at a time; assert
    every result and the trackers' states agree. Streams have their own box counts (0 included), pts offsets and
    time steps (0 included); each batch leaves out some streams and marks some frames skipped by the detector.
    Returns how many confirmed tracks were reported (so that a test can check the scene did track)."""
    rnd = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    batched = [make(s) for s in range(n_streams)]
    reference = copy.deepcopy(batched)
    pts = [rnd.randrange(0, 10**10) for _ in range(n_streams)]
    boxes = [rnd.choice([0, 1, 5, 20, 31]) for _ in range(n_streams)]
    reported = 0
    for frame in range(frames):
        members = [s for s in range(n_streams) if rnd.random() >= absent]
        rnd.shuffle(members)
        dets: list[Detections | None] = []
        for s in members:
            pts[s] += rnd.choice([0, FRAME_NS, FRAME_NS, FRAME_NS, 2 * FRAME_NS, 17_000_001])
            dets.append(None if rnd.random() < skipped else scene(boxes[s], frame + 7 * s, gen))
        got = update_streams([batched[s] for s in members], dets, [pts[s] for s in members])
        for s, d, result in zip(members, dets, got):
            tracker = reference[s]
            want = tracker.predict_only(pts[s]) if d is None else tracker.update(d, pts[s])
            assert_same_result(result, want)
            reported += len(result.tracks)
    for got_tracker, want_tracker in zip(batched, reference):
        assert_same_state(got_tracker, want_tracker)
    return reported


@pytest.mark.parametrize("per_class", [False, True])
@pytest.mark.parametrize("scene", [steady, flicker])
@pytest.mark.parametrize("seed", range(3))
def test_update_streams_matches_updating_each_stream_in_turn(scene: Callable[..., Detections], per_class: bool,
                                                              seed: int) -> None:
    reported = run_both(lambda s: ByteTrack(per_class=per_class, first_id=1000 * s), 12, 120, seed, scene)
    assert reported > 1000


@pytest.mark.parametrize("seed", range(3))
def test_update_streams_matches_with_oriented_boxes(seed: int) -> None:
    assert run_both(lambda s: ByteTrack(first_id=1000 * s), 8, 100, seed, oriented(flicker)) > 500


@pytest.mark.parametrize("seed", range(2))
def test_update_streams_matches_as_tracks_expire_and_coast(seed: int) -> None:
    """Short ``max_lost_s`` (tracks end often, ``ended_ids``) and long coasting (many predicted boxes), streams
    often absent."""
    def make(s: int) -> ByteTrack:
        return ByteTrack(max_lost_s=0.15, coast_s=0.1, min_hits=1, fuse_score=True, first_id=100 * s)

    assert run_both(make, 10, 150, seed, flicker, absent=0.4, skipped=0.2) > 500


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy, on the NaNs
@pytest.mark.parametrize("scene", [junky(flicker), junky(oriented(flicker))])
def test_update_streams_matches_with_malformed_rows(scene: Callable[..., Detections]) -> None:
    assert run_both(lambda s: ByteTrack(first_id=1000 * s), 8, 80, 3, scene) > 300


def test_update_streams_matches_with_other_settings_per_stream() -> None:
    """Trackers with different settings update in separate batches, and a lone tracker of its kind alone."""
    def make(s: int) -> ByteTrack:
        return ByteTrack(per_class=s % 3 == 0, match_iou=0.3 if s == 5 else 0.2, recover_sigmas=0.0 if s % 2 else 3.0)

    assert run_both(make, 9, 100, 7, flicker) > 500


def test_update_streams_resolves_conflicts_within_each_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flickering scenes give candidates that compete: the solver runs on those streams' blocks alone, and the
    results still match."""
    blocks: list[tuple[int, int]] = []
    solve = matching_module.match_pairs
    monkeypatch.setattr(bytetrack_native, "_lib", lambda: None)  # numpy's core (the compiled one: its own tests)

    def counting(sim: np.ndarray, min_sim: float) -> tuple[np.ndarray, np.ndarray]:
        blocks.append(sim.shape)
        return solve(sim, min_sim)

    monkeypatch.setattr(matching_module, "match_pairs", counting)
    run_both(lambda s: ByteTrack(first_id=1000 * s), 12, 80, 3, flicker, absent=0.0, skipped=0.0)
    assert blocks, "no stream had conflicting candidates: the scene does not test the solver"
    assert max(r for r, _ in blocks) <= 31 + 4, "a block spans more than one stream's tracks"


def test_update_streams_changes_no_tracker_when_a_time_goes_backwards() -> None:
    trackers = [ByteTrack(), ByteTrack()]
    update_streams(trackers, [steady(3, 0, torch.Generator()), None], [10 * FRAME_NS, 10 * FRAME_NS])
    before = copy.deepcopy(trackers)
    with pytest.raises(ValueError, match="went backwards"):
        update_streams(trackers, [steady(3, 1, torch.Generator()), None], [11 * FRAME_NS, 9 * FRAME_NS])
    for got, want in zip(trackers, before):
        assert_same_state(got, want)


def test_update_streams_changes_no_tracker_when_the_batch_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferstream.tracking import bytetrack_core

    trackers = [ByteTrack(), ByteTrack()]
    frames = [steady(3, 0, torch.Generator()), steady(4, 0, torch.Generator())]
    update_streams(trackers, frames, [0, 0])
    before = copy.deepcopy(trackers)

    def fail(*_args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(bytetrack_core, "_results", fail)
    monkeypatch.setattr(bytetrack_native, "_unpack", fail)  # the compiled core's last step
    with pytest.raises(RuntimeError, match="boom"):
        update_streams(trackers, frames, [FRAME_NS, FRAME_NS])
    for got, want in zip(trackers, before):
        assert_same_state(got, want)


@pytest.mark.parametrize(("args", "match"), [
    (([ByteTrack()], [], [0]), "1 trackers, 0 detections, 1 pts"),
    (("same", [None, None], [0, 0]), "appears twice"),
])
def test_update_streams_rejects_bad_arguments(args: tuple[object, ...], match: str) -> None:
    if args[0] == "same":
        tracker = ByteTrack()
        args = ([tracker, tracker], *args[1:])
    with pytest.raises(ValueError, match=match):
        update_streams(*args)  # type: ignore[arg-type]


def test_update_streams_updates_other_trackers_in_turn() -> None:
    """A tracker that is not a ByteTrack is updated through its own methods, in the same call."""
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[str, int]] = []
            self.inner = ByteTrack()

        def update(self, dets: Detections, pts_ns: int) -> TrackResult:
            self.calls.append(("update", pts_ns))
            return self.inner.update(dets, pts_ns)

        def predict_only(self, pts_ns: int) -> TrackResult:
            self.calls.append(("predict_only", pts_ns))
            return self.inner.predict_only(pts_ns)

        def reset(self) -> None:
            self.inner.reset()

    recorder, plain = Recorder(), ByteTrack()
    d = steady(2, 0, torch.Generator())
    results = update_streams([recorder, plain], [d, d], [5, 5])
    update_streams([recorder, plain], [None, None], [6, 6])
    assert recorder.calls == [("update", 5), ("predict_only", 6)]
    assert_same_result(results[0], results[1])
