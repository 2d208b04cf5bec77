"""Per-class thresholds (``DecodeParams.class_conf``, nvinfer's [class-attrs-N]) against the same thresholds given
another way: one decode per class with ``classes=(k,)`` and that class's ``conf``, merged by score."""
from __future__ import annotations

import torch
from _reference import yolo_raw

from inferstream.detections import Detections
from inferstream.models.base import DecodeParams, above_conf
from inferstream.models.detr import DetrDecoder
from inferstream.models.yolo import AnchorFreeDecoder, EndToEndDecoder


def _by_class(decoder: object, outputs: list[torch.Tensor], base: DecodeParams, nc: int) -> list[Detections]:
    """The reference: each listed class decoded alone at its own threshold, the rest together at ``conf``."""
    thresholds = dict(base.class_conf)
    rest = tuple(c for c in range(nc) if c not in thresholds)
    runs = [decoder(outputs, DecodeParams(conf=t, iou=base.iou, max_det=base.max_det, classes=(c,)))  # type: ignore[operator]
            for c, t in thresholds.items()]
    runs.append(decoder(outputs, DecodeParams(conf=base.conf, iou=base.iou, max_det=base.max_det, classes=rest)))  # type: ignore[operator]
    merged = []
    for parts in zip(*runs, strict=True):
        rows = Detections(boxes_xyxy=torch.cat([p.boxes_xyxy for p in parts]), scores=torch.cat([p.scores for p in parts]),
                          labels=torch.cat([p.labels for p in parts]))
        merged.append(rows[torch.argsort(rows.scores, descending=True)])
    return merged


def _assert_same(ours: list[Detections], ref: list[Detections]) -> None:
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref, strict=True):
        order = torch.argsort(o.scores, descending=True)
        torch.testing.assert_close(o.boxes_xyxy[order], r.boxes_xyxy)
        torch.testing.assert_close(o.scores[order], r.scores)
        torch.testing.assert_close(o.labels[order], r.labels)


def _thresholds_for_seen_classes(dets: list[Detections]) -> tuple[tuple[int, float], ...]:
    """A raised threshold for the most frequent class, a lowered one for the next, 1.0 (drop) for the third."""
    labels, counts = torch.cat([d.labels for d in dets]).unique(return_counts=True)
    seen = labels[torch.argsort(counts, descending=True)].tolist()
    assert len(seen) >= 3, "the fixture must yield at least three classes"
    scores = torch.cat([d.scores for d in dets])
    return ((seen[0], float(scores.median())), (seen[1], 0.1), (seen[2], 1.0))


def test_anchor_free_decoder_applies_per_class_thresholds() -> None:
    pred = yolo_raw("yolo11n.yaml")
    plain = AnchorFreeDecoder(80)([pred], DecodeParams(conf=0.1))
    params = DecodeParams(conf=0.2, iou=0.5, class_conf=_thresholds_for_seen_classes(plain))
    ours = AnchorFreeDecoder(80)([pred], params)
    _assert_same(ours, _by_class(AnchorFreeDecoder(80), [pred], params, 80))
    dropped = params.class_conf[2][0]
    assert all(not (d.labels == dropped).any() for d in ours)
    assert sum(map(len, ours)) > 0


def test_end_to_end_decoder_applies_per_class_thresholds() -> None:
    pred = yolo_raw("yolo26n.yaml", True)
    plain = EndToEndDecoder()([pred], DecodeParams(conf=0.05))
    params = DecodeParams(conf=0.15, class_conf=_thresholds_for_seen_classes(plain))
    _assert_same(EndToEndDecoder()([pred], params), _by_class(EndToEndDecoder(), [pred], params, 80))


def test_detr_decoder_applies_per_class_thresholds() -> None:
    gen = torch.Generator().manual_seed(5)
    boxes = torch.rand((2, 300, 4), generator=gen) * 0.5 + 0.2
    logits = torch.randn((2, 300, 91), generator=gen) * 2 - 3
    decoder = DetrDecoder(91, (384, 512))
    plain = decoder([boxes, logits], DecodeParams(conf=0.2))
    params = DecodeParams(conf=0.3, class_conf=_thresholds_for_seen_classes(plain))
    _assert_same(decoder([boxes, logits], params), _by_class(decoder, [boxes, logits], params, 91))


def test_above_conf_uses_conf_for_unlisted_and_higher_classes() -> None:
    scores = torch.tensor([0.5, 0.5, 0.5, 0.5])
    labels = torch.tensor([0, 1, 2, 9])
    params = DecodeParams(conf=0.4, class_conf=((1, 0.6), (2, 0.45)))
    assert above_conf(scores, labels, params).tolist() == [True, False, True, True]
    assert params.min_conf == 0.4
    assert DecodeParams(conf=0.4, class_conf=((3, 0.1),)).min_conf == 0.1
