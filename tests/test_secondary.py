"""secondary: which objects a secondary classifies and when a tracked object reuses its last result."""
from __future__ import annotations

import pytest
import torch

from inferstream.detections import Detections
from inferstream.errors import ConfigError
from inferstream.secondary import ObjectFilter, ReinferCache, parse_filter, plan_objects


def _dets(boxes: list[list[float]], labels: list[int], tracks: list[int] | None = None) -> Detections:
    return Detections(boxes_xyxy=torch.tensor(boxes, dtype=torch.float32), scores=torch.full((len(boxes),), 0.9),
                      labels=torch.tensor(labels), track_ids=None if tracks is None else torch.tensor(tracks))


@pytest.mark.parametrize(("flt", "rows"), [
    (ObjectFilter(), [0, 1, 2, 3]),
    (ObjectFilter(unique_id=1), [0, 2]),
    (ObjectFilter(labels=frozenset({"car"})), [1, 2]),
    (ObjectFilter(unique_id=1, labels=frozenset({"car"})), [2]),
    (ObjectFilter(min_size=(10, 30)), [0, 3]),
    (ObjectFilter(labels=frozenset({"bus"})), []),
])
def test_object_filter_rows(flt: ObjectFilter, rows: list[int]) -> None:
    dets = _dets([[0, 0, 10, 40], [0, 0, 5, 5], [0, 0, 30, 20], [5, 5, 100, 100]], [0, 1, 1, 0])
    assert flt.rows(dets, ("person", "car"), [1, 2, 1, 2]) == rows


def test_parse_filter_reads_the_properties_and_rejects_bad_sizes() -> None:
    assert parse_filter(-1, "", "") == ObjectFilter()
    assert parse_filter(3, "person, car", "32x64") == ObjectFilter(3, frozenset({"person", "car"}), (32, 64))
    assert parse_filter(0, "", "20").min_size == (20, 20)
    with pytest.raises(ConfigError, match="min-object-size '3xa'"):
        parse_filter(-1, "", "3xa")


def test_reinfer_cache_reclassifies_after_interval_and_forgets_absent_tracks() -> None:
    cache = ReinferCache(3)
    todo, reused = cache.plan([7, -1], 0)
    assert (todo, reused) == ([0, 1], {})
    cache.store([7, -1], [2, 5], [0.8, 0.6], 0)
    assert cache.plan([-1, 7], 1) == ([0], {1: (2, 0.8)})  # untracked: every frame; 7 reused
    assert cache.plan([7], 2) == ([], {0: (2, 0.8)})
    assert cache.plan([7], 3) == ([0], {})  # 3 frames later: again
    cache.store([7], [4], [0.5], 3)
    assert cache.plan([9], 4) == ([0], {})  # 7 absent: forgotten
    assert cache.plan([7], 5) == ([0], {})
    assert ReinferCache(0).plan([7, 7], 0) == ([0, 1], {})


def test_plan_objects_merges_new_and_reused_results_in_row_order() -> None:
    dets = _dets([[0, 0, 10, 10], [1, 1, 20, 20], [2, 2, 30, 30]], [0, 0, 1], tracks=[4, 5, 6])
    cache = ReinferCache(10)
    cache.store([5], [3], [0.7], 0)
    cache.plan([5], 0)
    plan = plan_objects(dets, ("person", "car"), [11, 12, 13], [1, 1, 1], ObjectFilter(labels=frozenset({"person"})),
                        cache, 1)
    assert plan is not None and plan.od_ids == [11, 12] and plan.todo == [0] and plan.reused == {1: (3, 0.7)}
    assert plan.boxes.tolist() == [[0, 0, 10, 10]]
    classified = _dets([[0, 0, 10, 10]], [6])
    assert plan.results(classified) == ([11, 12], [6, 3], [pytest.approx(0.9), 0.7])
    assert plan_objects(dets, ("person", "car"), [11, 12, 13], [1, 1, 1], ObjectFilter(unique_id=2), cache, 1) is None


def test_mean_and_std_override_the_familys_and_wrong_label_counts_name_the_shape() -> None:
    from classifier_models import LABELS

    from inferstream.inference import InferConfig
    from inferstream.models.base import PreprocessOverride
    from inferstream.secondary import ObjectClassifier

    cfg = InferConfig(model="classifier_models:resnet18_seeded", labels=LABELS, input_size=(32, 32), objects=True,
                      transform=PreprocessOverride(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)))
    runner = ObjectClassifier(cfg)
    assert (runner.preprocess.mean, runner.preprocess.std) == ((0.5,) * 3, (0.25,) * 3)
    assert runner.preprocess.resize == "stretch" and runner.family == "classifier"
    with pytest.raises(ConfigError, match=r"2 labels given but the classifier's output \(1, 8\) has 8 classes"):
        ObjectClassifier(InferConfig(model="classifier_models:resnet18_seeded", labels=("a", "b"), objects=True))
