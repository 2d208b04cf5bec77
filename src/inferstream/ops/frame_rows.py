"""A batch's detection rows, from model-input pixels back to each frame's own detections.

Runs on the host on a few hundred rows: no device work, so no GIL hand-off while other threads wait.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from inferstream.detections import Detections
from inferstream.ops.letterbox import clip_xyxy, unletterbox_keypoints, unletterbox_xyxy

if TYPE_CHECKING:
    from inferstream.ops.letterbox import Letterbox
    from inferstream.rawframe import RawFrame


def rows_in_frames(frames: list[RawFrame], merged: Detections, image_ids: torch.Tensor, lb: Letterbox,
                   coeffs: torch.Tensor | None = None, protos: torch.Tensor | None = None) -> list[Detections]:
    """A batch's rows (on the host, model-input pixels, ``image_ids``: each row's frame) as each frame's detections
    in frame pixels, with their masks when the decoder gave mask coefficients."""
    counts = torch.bincount(image_ids, minlength=len(frames)).tolist()
    # oriented boxes are stored unrotated (centre ± size/2): the same affine map applies to them
    boxes = unletterbox_xyxy(merged.boxes_xyxy.float(), lb, image_ids)
    if merged.angles_rad is None:  # an oriented box may legitimately poke out of the frame when rotated
        boxes = clip_xyxy(boxes, torch.tensor([(f.width, f.height) for f in frames], dtype=torch.float32)[image_ids])
    merged = Detections.trusted(boxes, merged.scores, merged.labels, merged.angles_rad, merged.track_ids,
                                merged.masks, merged.keypoints)  # the checked rows, mapped
    if merged.keypoints is not None:
        merged = replace(merged, keypoints=unletterbox_keypoints(merged.keypoints, lb, image_ids, frames))
    if coeffs is not None and protos is not None:
        from inferstream.ops.masks import attach_masks

        merged, counts = attach_masks(merged, counts, protos, coeffs, [(f.height, f.width) for f in frames])
    return merged.split(counts)
