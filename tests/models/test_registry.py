from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _reference import yolo_raw

from inferstream.backends.base import ModelInfo
from inferstream.detections import Detections
from inferstream.errors import ConfigError, UnsupportedModelError
from inferstream.models.base import DecodeParams, Family
from inferstream.models.registry import FAMILIES, detect_family, load_postprocess, make_decoder
from inferstream.models.yolo import AnchorFreeDecoder, EndToEndDecoder, ObbDecoder, ObbEndToEndDecoder

COCO = tuple(f"c{i}" for i in range(80))


@pytest.mark.parametrize(
    ("shapes", "info", "family"),
    [
        ([(1, 84, 8400)], ModelInfo(task="detect", names=COCO), "yolo"),  # v8/v11 ONNX, ultralytics metadata
        ([(1, 84, 8400)], ModelInfo(), "yolo"),  # no metadata at all
        ([(1, 6, 8400)], ModelInfo(task="detect", names=("Normal", "Fall")), "yolo"),  # 2 classes: 6 channels
        ([(None, 84, None)], ModelInfo(), "yolo"),  # dynamic batch and input size
        ([(1, 300, 6)], ModelInfo(task="detect", end2end=True), "yolo-end2end"),  # YOLO26 / YOLOv10
        ([(1, 300, 6)], ModelInfo(task="detect", end2end=False), "yolo-end2end"),  # export(nms=True) says False
        ([(4, 6, 6)], ModelInfo(end2end=True), "yolo-end2end"),  # max_det=6: only the hint tells
        ([(1, 85, 8400)], ModelInfo(task="obb", names=COCO), "yolo-obb"),
        ([(1, 85, 8400)], ModelInfo(names=COCO), "yolo-obb"),  # no task: 4 + 80 + 1 channels for 80 names
        ([(1, 85, 8400)], ModelInfo(), "yolo"),  # nothing to tell them apart: 81 classes
        ([(1, 20, 21504)], ModelInfo(task="obb", names=COCO[:15]), "yolo-obb"),  # DOTA-like 15 classes at 1024
        ([(1, 300, 7)], ModelInfo(task="obb", end2end=True), "yolo-obb-end2end"),
        ([(1, 300, 7)], ModelInfo(), "yolo-obb-end2end"),
    ],
)  # fmt: skip
def test_detect_family_reads_layout_and_hints(
    shapes: list[tuple[int | None, ...]], info: ModelInfo, family: str
) -> None:
    assert detect_family(shapes, info) == family


@pytest.mark.parametrize(
    ("yaml", "end2end", "task", "family", "decoder"),
    [("yolo11n.yaml", False, "detect", "yolo", AnchorFreeDecoder),
     ("yolo26n.yaml", True, "detect", "yolo-end2end", EndToEndDecoder),
     ("yolo11n-obb.yaml", False, "obb", "yolo-obb", ObbDecoder),
     ("yolo26n-obb.yaml", True, "obb", "yolo-obb-end2end", ObbEndToEndDecoder)],
)  # fmt: skip
def test_detect_family_and_make_decoder_on_real_outputs(
    yaml: str, end2end: bool, task: str, family: str, decoder: type
) -> None:
    pred = yolo_raw(yaml, end2end)
    info = ModelInfo(task=task, names=COCO, end2end=end2end)
    assert detect_family([tuple(pred.shape)], info) == family
    dec = make_decoder(family, [tuple(pred.shape)], info)
    assert isinstance(dec, decoder) and dec.num_classes == 80
    assert sum(map(len, dec([pred], DecodeParams(conf=0.25)))) > 0


@pytest.mark.parametrize(
    ("shapes", "info"),
    [([(1, 1000)], ModelInfo(task="detect")),  # a classifier's shape, but the model says it detects
     ([(1, 90, 8400)], ModelInfo(names=COCO))],  # neither 84 nor 85 channels for 80 names
)  # fmt: skip
def test_detect_family_rejects_outputs_no_family_fits(shapes: list[tuple[int, ...]], info: ModelInfo) -> None:
    expected = r"no decoder recognises outputs \[.*\].*Set model-family to one of: yolo .*postprocess"
    with pytest.raises(UnsupportedModelError, match=expected):
        detect_family(shapes, info)


def test_detect_family_rejects_outputs_several_families_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FAMILIES, "greedy", Family("greedy", "anything", lambda s, i: True,
                                                   lambda s, i, hw: EndToEndDecoder()))
    with pytest.raises(UnsupportedModelError, match=r"fit several families \['yolo', 'greedy'\]: set model-family"):
        detect_family([(1, 84, 8400)], ModelInfo())


def test_a_new_family_is_one_table_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    toy = Family("toy", "(B, K, 6) plus a second output", lambda s, i: len(s) == 2 and len(s[1]) == 2,
                 lambda s, i, hw: EndToEndDecoder(7))
    monkeypatch.setitem(FAMILIES, "toy", toy)
    shapes = [(1, 100, 6), (1, 100)]
    assert detect_family(shapes, ModelInfo()) == "toy"
    assert make_decoder("toy", shapes, ModelInfo()) == EndToEndDecoder(7)


def test_make_decoder_rejects_an_unknown_family() -> None:
    expected = r"model-family 'ssd': expected one of \['classifier', 'detr', 'rtdetr', 'yolo', 'yolo-end2end', 'yolo-obb', "
    with pytest.raises(ConfigError, match=expected):
        make_decoder("ssd", [(1, 300, 6)], ModelInfo())


@pytest.mark.parametrize(
    ("family", "shapes", "message"),
    [("yolo", [(1, 300, 6, 2)], r"yolo: expected one output \(B, 4 \+ nc, A\), got \[\(1, 300, 6, 2\)\]"),
     ("yolo-obb", [(1, 5, 8400)], r"yolo-obb: expected one output \(B, 5 \+ nc, A\), got \[\(1, 5, 8400\)\]"),
     ("yolo-end2end", [(1, 84, 8400)], r"yolo-end2end: expected an output \(B, K, 6\), got \[\(1, 84, 8400\)\]"),
     ("yolo-obb-end2end", [(1, 300, 6)], r"yolo-obb-end2end: expected an output \(B, K, 7\), got \[\(1, 300, 6\)\]")],
)  # fmt: skip
def test_make_decoder_rejects_outputs_of_another_layout(
    family: str, shapes: list[tuple[int, ...]], message: str
) -> None:
    with pytest.raises(UnsupportedModelError, match=message):
        make_decoder(family, shapes, ModelInfo())


def test_make_decoder_rejects_a_class_count_that_contradicts_the_names() -> None:
    expected = r"yolo: expected 4 \+ 80 channels for the model's 80 names, got 85"
    with pytest.raises(UnsupportedModelError, match=expected):
        make_decoder("yolo", [(1, 85, 8400)], ModelInfo(task="obb", names=COCO))


def test_make_decoder_counts_classes() -> None:
    assert make_decoder("yolo", [(1, 6, 8400)], ModelInfo()).num_classes == 2  # type: ignore[attr-defined]
    assert make_decoder("yolo-obb", [(1, 20, 8400)], ModelInfo()).num_classes == 15  # type: ignore[attr-defined]
    assert make_decoder("yolo-end2end", [(1, 300, 6)], ModelInfo(names=COCO)).num_classes == 80  # type: ignore[attr-defined]
    assert make_decoder("yolo-end2end", [(1, 300, 6)], ModelInfo()).num_classes == 0  # type: ignore[attr-defined]


# --- user post-processing -------------------------------------------------------------------------------------

USER_MODULE = '''
import torch
from inferstream.detections import Detections

NOT_A_FUNCTION = 3


def top1(outputs, params):
    """One box per frame: the row with the highest score of a (B, K, 6) output."""
    out = []
    for pred in outputs[0]:
        best = pred[pred[:, 4].argmax()][None]
        out.append(Detections(best[:, :4].float(), best[:, 4].float(), best[:, 5].long()))
    return out


def wrong_type(outputs, params):
    return {"boxes": outputs[0]}


def too_few(outputs, params):
    return [Detections.empty()]
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_postprocess.py").write_text(textwrap.dedent(USER_MODULE))
    (tmp_path / "broken_postprocess.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_postprocess"
    for name in ("my_postprocess", "broken_postprocess"):
        sys.modules.pop(name, None)


def test_load_postprocess_calls_the_users_function(user_module: str) -> None:
    decoder = load_postprocess(f"{user_module}:top1")
    pred = torch.tensor([[[0, 0, 10, 10, 0.2, 1], [5, 5, 20, 20, 0.9, 3]],
                         [[1, 1, 2, 2, 0.5, 0], [0, 0, 1, 1, 0.1, 2]]])  # fmt: skip
    out = decoder([pred], DecodeParams())
    assert [d.labels.tolist() for d in out] == [[3], [0]]
    assert out[0].boxes_xyxy.tolist() == [[5.0, 5.0, 20.0, 20.0]]


@pytest.mark.parametrize("spec", ["my_postprocess", "my_postprocess:", ":top1", "a:b:c", "my-postprocess:top1", ""])
def test_load_postprocess_rejects_a_malformed_spec(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"postprocess .*: expected 'package.module:function'"):
        load_postprocess(spec)


def test_load_postprocess_rejects_a_module_that_does_not_import(user_module: str) -> None:
    with pytest.raises(ConfigError, match=r"postprocess 'no_such_module_xyz:fn': cannot import 'no_such_module_xyz'"):
        load_postprocess("no_such_module_xyz:fn")
    with pytest.raises(ConfigError, match=r"cannot import 'broken_postprocess': boom at import"):
        load_postprocess("broken_postprocess:fn")


def test_load_postprocess_rejects_a_missing_attribute(user_module: str) -> None:
    with pytest.raises(ConfigError, match=r"module 'my_postprocess' has no attribute 'nope'"):
        load_postprocess(f"{user_module}:nope")


def test_load_postprocess_rejects_something_not_callable(user_module: str) -> None:
    with pytest.raises(ConfigError, match=r"postprocess 'my_postprocess:NOT_A_FUNCTION': expected a function, got int"):
        load_postprocess(f"{user_module}:NOT_A_FUNCTION")


def test_user_postprocess_rejects_a_result_that_is_not_detections(user_module: str) -> None:
    decoder = load_postprocess(f"{user_module}:wrong_type")
    with pytest.raises(ValueError, match=r"my_postprocess:wrong_type: expected a list of Detections, got dict"):
        decoder([torch.zeros(1, 300, 6)], DecodeParams())


def test_user_postprocess_rejects_one_result_per_batch_instead_of_per_frame(user_module: str) -> None:
    decoder = load_postprocess(f"{user_module}:too_few")
    with pytest.raises(ValueError, match=r"my_postprocess:too_few: expected 2 Detections \(one per frame\), got 1"):
        decoder([torch.zeros(2, 300, 6)], DecodeParams())
    one = load_postprocess(f"{user_module}:too_few")([torch.zeros(1, 300, 6)], DecodeParams())
    assert isinstance(one[0], Detections)
