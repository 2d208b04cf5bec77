"""yolo-seg / yolo-pose: auto-detection from task hints, prototypes and kpt_shape; clear errors for outputs that
do not fit, named with their shapes (unit level and at pyinfer's start)."""
from __future__ import annotations

from pathlib import Path

import pytest
from gst_helpers import run_pipeline

from inferstream.backends.base import ModelInfo
from inferstream.errors import UnsupportedModelError
from inferstream.models.registry import FAMILIES, detect_family, make_decoder
from inferstream.models.yolo_tasks import PoseDecoder, SegDecoder

NAMES = tuple(str(i) for i in range(80))
TASK_MODELS = Path(__file__).resolve().parents[1] / "task_models.py"


@pytest.mark.parametrize(("shapes", "info", "family"), [
    ([(1, 116, 8400), (1, 32, 160, 160)], ModelInfo(names=NAMES, task="segment"), "yolo-seg"),
    ([(1, 116, 8400), (1, 32, 160, 160)], ModelInfo(), "yolo-seg"),  # no metadata: the prototypes tell
    ([(1, 300, 38), (1, 32, 160, 160)], ModelInfo(names=NAMES, task="segment", end2end=True), "yolo-seg"),
    ([(1, 135, 8400)], ModelInfo(names=NAMES, task="pose", extra={"kpt_shape": "[17, 3]"}), "yolo-pose"),
    ([(1, 300, 57)], ModelInfo(names=NAMES, task="pose", end2end=True), "yolo-pose"),
    ([(1, 84, 8400)], ModelInfo(names=NAMES, task="detect"), "yolo"),  # the detect family is not taken
])
def test_auto_detection(shapes: list, info: ModelInfo, family: str) -> None:
    assert detect_family(shapes, info) == family


def test_decoders_read_the_layout() -> None:
    assert make_decoder("yolo-seg", [(1, 116, 8400), (1, 32, 160, 160)], ModelInfo(names=NAMES)) == SegDecoder(80)
    hand = ModelInfo(task="pose", extra={"kpt_shape": "[21, 2]"})  # 21 hand keypoints, no visibility
    assert make_decoder("yolo-pose", [(1, 4 + 1 + 42, 8400)], hand) == PoseDecoder(1, (21, 2))
    assert make_decoder("yolo-pose", [(1, 4 + 1 + 51, 8400)], ModelInfo(names=("person",), task="pose")) == \
        PoseDecoder(1, (17, 3))
    assert FAMILIES["yolo-seg"].kinds == {"boxes", "masks"} and FAMILIES["yolo-pose"].kinds == {"boxes", "keypoints"}


@pytest.mark.parametrize(("family", "shapes", "info", "words"), [
    ("yolo-seg", [(1, 116, 8400)], ModelInfo(names=NAMES, task="segment"), ["(1, 116, 8400)", "prototypes"]),
    ("yolo-pose", [(1, 136, 8400)], ModelInfo(names=NAMES, task="pose"), ["(1, 136, 8400)", "52 channels"]),
    ("yolo-pose", [(1, 135, 8400)], ModelInfo(names=NAMES, task="pose", extra={"kpt_shape": "[17]"}), ["kpt_shape"]),
    ("yolo-pose", [(1, 300, 58)], ModelInfo(names=NAMES, task="pose", end2end=True), ["58 values", "(1, 300, 58)"]),
])
def test_outputs_that_do_not_fit_name_their_shape(family: str, shapes: list, info: ModelInfo,
                                                  words: list[str]) -> None:
    with pytest.raises(UnsupportedModelError) as err:
        make_decoder(family, shapes, info)
    assert all(w in str(err.value) for w in words), str(err.value)
    with pytest.raises(UnsupportedModelError):  # auto-detection reaches the same family and the same error
        make_decoder(detect_family(shapes, info), shapes, info)


@pytest.mark.parametrize(("factory", "words"), [("seg_without_protos", ["yolo-seg", "(1, 116, 8400)", "prototypes"]),
                                                ("pose_not_dividing", ["yolo-pose", "(1, 136, 8400)"])])
def test_pyinfer_stops_at_start_naming_the_shape(factory: str, words: list[str]) -> None:
    result = run_pipeline("videotestsrc num-buffers=2 ! video/x-raw,format=RGB,width=64,height=48 ! "
                          f"pyinfer model={TASK_MODELS}:{factory} ! fakesink")
    assert result.errors and all(w in result.errors[0] for w in words), result.errors


def test_end_to_end_rows_keep_their_coefficients_and_keypoints() -> None:
    """YOLO26 end-to-end rows ``x1, y1, x2, y2, score, class, extra...``: rows above conf keep their own extras."""
    import torch

    from inferstream.models.base import DecodeParams

    rows = torch.zeros((1, 3, 6 + 32))
    rows[0, :, :4] = torch.tensor([[10.0, 10, 50, 60], [0, 0, 5, 5], [100, 80, 140, 200]])
    rows[0, :, 4] = torch.tensor([0.9, 0.1, 0.8])
    rows[0, :, 5] = torch.tensor([3.0, 1, 7])
    rows[0, :, 6:] = torch.arange(3 * 32, dtype=torch.float32).reshape(3, 32)
    img, dets, coeffs = SegDecoder(80, end2end=True).flat_masked([rows, torch.zeros((1, 32, 160, 160))],
                                                                   DecodeParams(conf=0.25))
    assert img.tolist() == [0, 0] and dets.labels.tolist() == [3, 7]
    assert torch.equal(coeffs, rows[0, [0, 2], 6:])
    pose = torch.cat((rows[..., :6], torch.rand((1, 3, 51))), dim=2)
    _, kp = PoseDecoder(1, end2end=True).flat([pose], DecodeParams(conf=0.25))
    assert torch.equal(kp.keypoints, pose[0, [0, 2], 6:].reshape(2, 17, 3))
