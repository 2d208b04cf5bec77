"""The classifier family: auto-detected from one (B, nc) output; top-1 of logits and of probabilities."""
from __future__ import annotations

import torch

from inferstream.backends.base import ModelInfo
from inferstream.models.base import DecodeParams
from inferstream.models.classifier import top1
from inferstream.models.registry import FAMILIES, detect_family, make_decoder


def test_top1_softmaxes_logits_and_keeps_probabilities() -> None:
    logits = torch.tensor([[2.0, 1.0, -1.0], [0.0, 0.0, 3.0]])
    labels, probs = top1(logits)
    assert labels.tolist() == [0, 2]
    torch.testing.assert_close(probs, logits.softmax(1).max(1).values)
    given = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]])
    labels, probs = top1(given)
    assert labels.tolist() == [1, 0] and probs.tolist() == [0.699999988079071, 0.5]


def test_a_single_2d_output_is_a_classifier_and_nothing_else_matches_it() -> None:
    info = ModelInfo()
    assert detect_family([(1, 1000)], info) == "classifier"
    assert [n for n, f in FAMILIES.items() if f.matches([(1, 84, 8400)], info)] != ["classifier"]
    assert not FAMILIES["classifier"].matches([(1, 84, 8400)], info)
    assert FAMILIES["classifier"].preprocess.input_size == (224, 224)


def test_classifier_as_primary_gives_one_whole_input_box_per_image() -> None:
    decoder = make_decoder("classifier", [(2, 3)], ModelInfo(), (224, 320))
    ids, rows = decoder.flat([torch.tensor([[0.0, 5.0, 0.0], [0.2, 0.0, 0.0]])], DecodeParams(conf=0.5))
    assert ids.tolist() == [0] and rows.labels.tolist() == [1]  # image 0's top-1 (0.99) clears 0.5, image 1's (0.38) not
    assert rows.boxes_xyxy.tolist() == [[0.0, 0.0, 320.0, 224.0]]
