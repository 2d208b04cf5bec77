"""Decoders against ultralytics' own non_max_suppression on real raw outputs of random-weight models.

The models are built from yaml with calibrated random weights (see ``_reference.yolo_model``) and run on two
letterboxed images, so every comparison below sees a few hundred candidates with distinct scores.
"""
from __future__ import annotations

import re

import pytest
import torch
from _reference import DEVICES, reference_nms, yolo_raw

from inferstream.detections import Detections
from inferstream.models.base import DecodeParams
from inferstream.models.yolo import AnchorFreeDecoder, EndToEndDecoder, ObbDecoder, ObbEndToEndDecoder

NMS_PARAMS = [
    DecodeParams(conf=0.25, iou=0.45),
    DecodeParams(conf=0.1, iou=0.7, max_det=50),
    DecodeParams(conf=0.25, iou=0.5, agnostic=True),
    DecodeParams(conf=0.1, iou=0.6, classes=(0, 5, 17)),
]
E2E_PARAMS = [DecodeParams(conf=0.5), DecodeParams(conf=0.25, max_det=40), DecodeParams(conf=0.1, classes=(0, 5, 17))]


def _reference(pred: torch.Tensor, p: DecodeParams, rotated: bool, end2end: bool) -> list[torch.Tensor]:
    return reference_nms(pred, p.conf, p.iou, classes=list(p.classes) if p.classes else None, agnostic=p.agnostic,
                         max_det=p.max_det, nc=80 if rotated else 0, rotated=rotated, end2end=end2end)  # fmt: skip


def _assert_same(ours: list[Detections], ref: list[torch.Tensor], rotated: bool) -> None:
    assert len(ours) == len(ref)
    for d, r in zip(ours, ref, strict=True):
        boxes = torch.cat((r[:, :2] - r[:, 2:4] / 2, r[:, :2] + r[:, 2:4] / 2), 1) if rotated else r[:, :4]
        torch.testing.assert_close(d.boxes_xyxy, boxes, rtol=0, atol=1e-4)
        torch.testing.assert_close(d.scores, r[:, 4])
        torch.testing.assert_close(d.labels, r[:, 5].long())
        if rotated:
            assert d.angles_rad is not None
            torch.testing.assert_close(d.angles_rad, r[:, 6])
        else:
            assert d.angles_rad is None
    assert sum(len(d) for d in ours) > 0, "the comparison must see detections"


@pytest.mark.parametrize("yaml", ["yolo11n.yaml", "yolo26n.yaml"])
@pytest.mark.parametrize("params", NMS_PARAMS)
def test_anchor_free_decoder_matches_ultralytics_nms(yaml: str, params: DecodeParams) -> None:
    pred = yolo_raw(yaml)
    assert pred.shape == (2, 84, 2100)
    _assert_same(AnchorFreeDecoder(80)([pred], params), _reference(pred, params, False, False), rotated=False)


@pytest.mark.parametrize("params", E2E_PARAMS)
def test_end2end_decoder_matches_ultralytics(params: DecodeParams) -> None:
    pred = yolo_raw("yolo26n.yaml", end2end=True)
    assert pred.shape == (2, 300, 6)
    ours = EndToEndDecoder()([pred], params)
    _assert_same(ours, _reference(pred, params, False, True), rotated=False)
    assert any(len(d) < 300 for d in ours)


@pytest.mark.parametrize("yaml", ["yolo11n-obb.yaml", "yolo26n-obb.yaml"])
@pytest.mark.parametrize("params", NMS_PARAMS[::2])
def test_obb_decoder_matches_ultralytics_rotated_nms(yaml: str, params: DecodeParams) -> None:
    pred = yolo_raw(yaml)
    assert pred.shape == (2, 85, 2100)
    _assert_same(ObbDecoder(80)([pred], params), _reference(pred, params, True, False), rotated=True)


@pytest.mark.parametrize("params", E2E_PARAMS)
def test_obb_end2end_decoder_matches_ultralytics(params: DecodeParams) -> None:
    pred = yolo_raw("yolo26n-obb.yaml", end2end=True)
    assert pred.shape == (2, 300, 7)
    _assert_same(ObbEndToEndDecoder()([pred], params), _reference(pred, params, True, True), rotated=True)


def test_anchor_free_decoder_caps_candidates_at_max_nms_like_ultralytics() -> None:
    pred = yolo_raw("yolo11n.yaml")
    params = DecodeParams(conf=0.05, iou=0.45)
    ref = reference_nms(pred, params.conf, params.iou, max_nms=40)
    _assert_same(AnchorFreeDecoder(80, max_nms=40)([pred], params), ref, rotated=False)


def test_decoders_return_typed_empty_detections_when_nothing_passes() -> None:
    params = DecodeParams(conf=1.0)  # scores are never strictly above 1
    cases = [(AnchorFreeDecoder(80), yolo_raw("yolo11n.yaml")), (ObbDecoder(80), yolo_raw("yolo11n-obb.yaml")),
             (EndToEndDecoder(), yolo_raw("yolo26n.yaml", True)),
             (ObbEndToEndDecoder(), yolo_raw("yolo26n-obb.yaml", True))]  # fmt: skip
    for decoder, pred in cases:
        out = decoder([pred], params)
        assert [len(d) for d in out] == [0, 0]
        assert all(d.boxes_xyxy.shape == (0, 4) and d.oriented == isinstance(decoder, (ObbDecoder, ObbEndToEndDecoder))
                   for d in out)  # fmt: skip


def _synthetic(batch: int, rows: int, cols: int, seed: int) -> torch.Tensor:
    """A raw-head-like (B, 4 + nc [+ 1], A) tensor: clustered boxes, sparse scores, angles; no model needed."""
    g = torch.Generator().manual_seed(seed)
    ctr = torch.rand(batch, 2, 1, generator=g) * 200 + torch.randn(batch, 2, cols, generator=g) * 30
    wh = torch.rand(batch, 2, cols, generator=g) * 60 + 8
    scores = torch.rand(batch, rows - 4, cols, generator=g).pow(6)
    return torch.cat((ctr, wh, scores), 1)


@pytest.mark.parametrize("device", DEVICES)
def test_decoders_give_the_same_detections_on_every_device(device: str) -> None:
    params = DecodeParams(conf=0.3, iou=0.5, max_det=100)
    raw, obb = _synthetic(3, 4 + 5, 2000, seed=0), _synthetic(3, 4 + 5 + 1, 2000, seed=1)
    rows = torch.cat((raw[:, :4].transpose(1, 2), raw[:, 4:6].transpose(1, 2)), 2)[:, :300]
    rows[..., 5] = rows[..., 5].mul(5).floor()
    cases = [(AnchorFreeDecoder(5), raw), (ObbDecoder(5), obb), (EndToEndDecoder(), rows)]
    for decoder, pred in cases:
        expected = decoder([pred], params)
        got = decoder([pred.to(device)], params)
        assert sum(map(len, expected)) > 0
        for e, d in zip(expected, got, strict=True):
            assert d.boxes_xyxy.device.type == device
            torch.testing.assert_close(d.to("cpu").boxes_xyxy, e.boxes_xyxy)
            torch.testing.assert_close(d.to("cpu").labels, e.labels)


def test_anchor_free_decoder_accepts_half_precision_outputs() -> None:
    pred = yolo_raw("yolo11n.yaml")
    params = DecodeParams(conf=0.25, iou=0.45)
    full, half = AnchorFreeDecoder(80)([pred], params), AnchorFreeDecoder(80)([pred.half()], params)
    assert all(h.boxes_xyxy.dtype == torch.float32 for h in half)
    assert abs(sum(map(len, full)) - sum(map(len, half))) <= 0.05 * sum(map(len, full))


@pytest.mark.parametrize(
    ("decoder", "name"),
    [(AnchorFreeDecoder(80), "yolo"), (ObbDecoder(80), "yolo-obb"), (EndToEndDecoder(), "yolo-end2end"),
     (ObbEndToEndDecoder(), "yolo-obb-end2end")],
)  # fmt: skip
def test_decoder_rejects_no_outputs(decoder, name: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=f"{name}: expected at least one output tensor, got none"):
        decoder([], DecodeParams())


@pytest.mark.parametrize(
    ("decoder", "expected", "bad"),
    [(AnchorFreeDecoder(80), r"\(B, 84, A\)", (1, 85, 100)), (ObbDecoder(80), r"\(B, 85, A\)", (1, 84, 100)),
     (EndToEndDecoder(), r"\(B, K, 6\)", (1, 300, 7)), (ObbEndToEndDecoder(), r"\(B, K, 7\)", (300, 7))],
)  # fmt: skip
def test_decoder_rejects_an_output_of_another_layout(decoder, expected: str, bad: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    message = rf"expected a float output {expected}, got torch.float32 {re.escape(str(bad))}"
    with pytest.raises(ValueError, match=message):
        decoder([torch.zeros(bad)], DecodeParams())
