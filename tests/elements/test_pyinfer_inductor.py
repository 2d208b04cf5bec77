"""pyinfer graph=inductor in a real pipeline: the real person detector (an ultralytics checkpoint, traced and then
compiled by torch.compile) finds the same people on vtest as the uncompiled model, frame by frame."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gst_helpers import labelled_boxes, run_pipeline


def test_pyinfer_inductor_finds_the_uncompiled_models_people_on_every_frame(vtest: Path) -> None:
    from inferstream.samples import person_detector

    frames = 6
    model = person_detector("pt")
    desc = (f"filesrc location={vtest} ! decodebin ! identity eos-after={frames + 1} ! videoconvert "
            f"! video/x-raw,format=RGB ! tee name=t "
            f"t. ! queue ! pyinfer name=plain trust-checkpoint=true model={model} graph=off ! fakesink "
            f"t. ! queue ! pyinfer name=compiled trust-checkpoint=true model={model} graph=inductor ! fakesink")
    result = run_pipeline(desc, {"plain": labelled_boxes, "compiled": labelled_boxes}, timeout_s=400)
    assert not result.errors
    assert len(result.seen["plain"]) == len(result.seen["compiled"]) == frames
    people = 0
    for (labels, boxes), (labels_compiled, boxes_compiled) in zip(result.seen["plain"], result.seen["compiled"]):
        assert labels == labels_compiled
        np.testing.assert_allclose(boxes_compiled, boxes, atol=0.05)  # pixels of 768x576: rounding only
        people += len(boxes)
    assert people >= 3 * frames  # pedestrians are found on a typical frame
