"""DETR decoders against the families' own post-processing code, and their detection from output layouts."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from inferstream.backends.base import ModelInfo
from inferstream.errors import UnsupportedModelError
from inferstream.models.base import DecodeParams
from inferstream.models.detr import DetrDecoder, RtDetrDecoder
from inferstream.models.registry import FAMILIES, detect_family, make_decoder

COCO = tuple(f"c{i}" for i in range(80))
INPUT_HW = (384, 512)


def _raw(seed: int, batch: int = 2, queries: int = 300, classes: int = 91) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    boxes = torch.rand((batch, queries, 4), generator=gen) * 0.5 + 0.2
    logits = torch.randn((batch, queries, classes), generator=gen) * 2 - 3
    return boxes, logits


def _sorted_rows(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    rows = torch.cat([boxes, scores[:, None], labels[:, None].float()], dim=1)
    return rows[torch.argsort(rows[:, 4], descending=True, stable=True)]


@pytest.mark.parametrize("seed", range(3))
def test_detr_decoder_equals_rfdetr_postprocess(seed: int) -> None:
    from rfdetr.models.postprocess import PostProcess

    boxes, logits = _raw(seed)
    threshold = 0.3
    target = torch.tensor([INPUT_HW] * boxes.shape[0])
    ref = PostProcess(num_select=300)({"pred_logits": logits, "pred_boxes": boxes}, target_sizes=target)
    ours = DetrDecoder(91, INPUT_HW, boxes_at=1)([logits, boxes], DecodeParams(conf=threshold, max_det=300))
    for o, r in zip(ours, ref):
        keep = r["scores"] > threshold
        expected = _sorted_rows(r["boxes"][keep], r["scores"][keep], r["labels"][keep])
        assert len(o) == int(keep.sum()) > 0
        # rfdetr clamps to the image; the runner clips after mapping back to the frame
        got = _sorted_rows(o.boxes_xyxy.clamp(min=0).minimum(torch.tensor([512, 384, 512, 384])), o.scores, o.labels)
        torch.testing.assert_close(got, expected)


def test_detr_decoder_equals_transformers_rtdetr_postprocess() -> None:
    from transformers import RTDetrImageProcessor

    boxes, logits = _raw(7, classes=80)
    outputs = SimpleNamespace(logits=logits, pred_boxes=boxes)
    ref = RTDetrImageProcessor().post_process_object_detection(outputs, threshold=0.3, target_sizes=[INPUT_HW] * 2)
    ours = DetrDecoder(80, INPUT_HW, boxes_at=1)([logits, boxes], DecodeParams(conf=0.3))
    for o, r in zip(ours, ref):
        assert len(o) == len(r["scores"]) > 0
        torch.testing.assert_close(_sorted_rows(o.boxes_xyxy, o.scores, o.labels),
                                   _sorted_rows(r["boxes"], r["scores"], r["labels"]))


def test_detr_decoder_applies_classes_and_max_det() -> None:
    boxes, logits = _raw(3)
    every = DetrDecoder(91, INPUT_HW)([boxes, logits], DecodeParams(conf=0.2))
    few = DetrDecoder(91, INPUT_HW)([boxes, logits], DecodeParams(conf=0.2, classes=(1, 5), max_det=4))
    for a, b in zip(every, few):
        wanted = a[(a.labels == 1) | (a.labels == 5)]
        torch.testing.assert_close(b.boxes_xyxy, wanted.boxes_xyxy[:4])  # the 4 best, in score order


def test_rtdetr_rows_and_scores_layouts_agree() -> None:
    """ultralytics >= 8.4 rows (top-k of queries x classes) and the older per-query class scores give the same
    detections when each query has one class above the threshold."""
    gen = torch.Generator().manual_seed(0)
    boxes = torch.rand((1, 50, 4), generator=gen) * 0.5 + 0.2
    scores = torch.rand((1, 50, 80), generator=gen) * 0.3
    scores[0, torch.arange(50), torch.arange(50) % 80] += 0.6
    best, cls = scores.max(dim=2)
    order = best.argsort(dim=1, descending=True)
    rows = torch.cat([boxes, best[..., None], cls[..., None].float()], dim=2)[:, order[0]]
    a = RtDetrDecoder(80, INPUT_HW, rows=True)([rows], DecodeParams(conf=0.5))[0]
    b = RtDetrDecoder(80, INPUT_HW)([torch.cat([boxes, scores], dim=2)], DecodeParams(conf=0.5))[0]
    assert len(a) == 50
    torch.testing.assert_close(_sorted_rows(a.boxes_xyxy, a.scores, a.labels),
                               _sorted_rows(b.boxes_xyxy, b.scores, b.labels))


@pytest.mark.parametrize(
    ("shapes", "info", "family"),
    [([(1, 300, 4), (1, 300, 91)], ModelInfo(extra={"output_names": "dets,labels"}), "detr"),  # rfdetr ONNX
     ([(1, 300, 80), (1, 300, 4)], ModelInfo(), "detr"),  # transformers' (logits, pred_boxes)
     ([(1, 300, 4), (1, 300, 4)], ModelInfo(extra={"output_names": "logits,pred_boxes"}), "detr"),  # 4 classes
     ([(1, 300, 84)], ModelInfo(task="detect", names=COCO), "rtdetr"),  # older ultralytics RT-DETR export
     ([(1, 300, 84)], ModelInfo(), "rtdetr"),
     ([(1, 300, 6)], ModelInfo(task="detect", names=COCO, extra={"head": "rtdetr"}), "rtdetr"),  # ultralytics 8.4
     ([(1, 300, 6)], ModelInfo(task="detect", names=COCO), "yolo-end2end"),
     ([(1, 84, 8400)], ModelInfo(task="detect", names=COCO), "yolo")],
)  # fmt: skip
def test_detr_layouts_are_detected(shapes: list[tuple[int, ...]], info: ModelInfo, family: str) -> None:
    assert detect_family(shapes, info) == family


def test_detr_boxes_output_is_found_by_names_when_shapes_cannot_tell() -> None:
    decoder = make_decoder("detr", [(1, 300, 4), (1, 300, 4)], ModelInfo(extra={"output_names": "logits,boxes"}),
                           INPUT_HW)
    assert isinstance(decoder, DetrDecoder) and decoder.boxes_at == 1 and decoder.input_hw == INPUT_HW


@pytest.mark.parametrize(
    ("family", "shapes", "message"),
    [("detr", [(1, 300, 4)], r"detr: expected outputs boxes \(B, Q, 4\) and logits \(B, Q, C\)"),
     ("detr", [(1, 300, 4), (1, 100, 91)], r"detr: expected outputs boxes"),
     ("rtdetr", [(1, 84, 8400)], r"rtdetr: expected one output \(B, Q, 4 \+ nc\) for the model's 80 names")],
)  # fmt: skip
def test_detr_builders_reject_other_layouts(family: str, shapes: list[tuple[int, ...]], message: str) -> None:
    with pytest.raises(UnsupportedModelError, match=message):
        make_decoder(family, shapes, ModelInfo(names=COCO if family == "rtdetr" else None))


def test_detr_families_declare_their_preprocessing() -> None:
    detr, rtdetr, yolo = FAMILIES["detr"].preprocess, FAMILIES["rtdetr"].preprocess, FAMILIES["yolo"].preprocess
    assert detr.resize == "stretch" and detr.mean == (0.485, 0.456, 0.406) and detr.resample == "float"
    assert rtdetr.resize == "stretch" and not rtdetr.normalises and rtdetr.resample == "cv2"
    assert yolo.resize == "letterbox" and yolo.pad_value == 114 and not yolo.normalises
