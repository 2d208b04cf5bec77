"""The one result type that flows from models/ through tracking/ to meta/ writers."""
from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import repeat
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from torch import Tensor


def _expect(t: Tensor, name: str, shape: tuple[int | None, ...], dtype: torch.dtype) -> None:
    if t.dtype != dtype or t.ndim != len(shape) or any(s not in (None, d) for s, d in zip(shape, t.shape)):
        raise ValueError(f"{name}: expected {dtype} {shape}, got {t.dtype} {tuple(t.shape)}")


@dataclass(frozen=True, slots=True)
class Detections:
    """One frame's detections in source-frame pixels. N may be 0.

    Oriented boxes keep ``boxes_xyxy`` as the *unrotated* box (centre and size of the rotated rectangle,
    axis-aligned) and put the rotation in ``angles_rad`` (clockwise in image coordinates, y down, as
    ultralytics' OBB ``xywhr`` and GstAnalytics' oriented ODMtd both use).

    Instance masks (``masks``) are one uint8 crop per row at frame resolution, values 0/1, covering the pixels
    ``[round(x1), round(x1) + w) x [round(y1), round(y1) + h)`` of its box (the box as the ODMtd stores it, clipped
    to the frame): a full-frame mask per object would cost ``H x W`` bytes each, a crop only its box. Keypoints
    (``keypoints``) are ``(N, K, 3)`` x, y, score in frame pixels.
    """

    boxes_xyxy: Tensor  # float32 [N, 4]
    scores: Tensor  # float32 [N]
    labels: Tensor  # int64 [N], index into the model's label list
    angles_rad: Tensor | None = None  # float32 [N], oriented boxes only
    track_ids: Tensor | None = None  # int64 [N], -1 = not tracked; set by tracking/
    masks: tuple[Tensor, ...] | None = None  # N uint8 [h_i, w_i] box-sized crops, instance-segmentation families
    keypoints: Tensor | None = None  # float32 [N, K, 3] x, y, score; pose families

    def __post_init__(self) -> None:
        n = self.boxes_xyxy.shape[0] if self.boxes_xyxy.ndim == 2 else -1
        _expect(self.boxes_xyxy, "boxes_xyxy", (n, 4), torch.float32)
        _expect(self.scores, "scores", (n,), torch.float32)
        _expect(self.labels, "labels", (n,), torch.int64)
        if self.angles_rad is not None:
            _expect(self.angles_rad, "angles_rad", (n,), torch.float32)
        if self.track_ids is not None:
            _expect(self.track_ids, "track_ids", (n,), torch.int64)
        if self.keypoints is not None:
            _expect(self.keypoints, "keypoints", (n, None, 3), torch.float32)
        tensors = [t for t in (getattr(self, f.name) for f in fields(self)) if isinstance(t, torch.Tensor)]
        if self.masks is not None:
            if not isinstance(self.masks, tuple) or len(self.masks) != n:
                raise ValueError(f"masks: expected a tuple of {n} crops, got {type(self.masks).__name__}")
            for i, m in enumerate(self.masks):
                _expect(m, f"masks[{i}]", (None, None), torch.uint8)
            tensors += self.masks
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise ValueError(f"all fields must share one device, got {sorted(map(str, devices))}")

    @classmethod
    def trusted(cls, boxes_xyxy: Tensor, scores: Tensor, labels: Tensor, angles_rad: Tensor | None = None,
                track_ids: Tensor | None = None, masks: tuple[Tensor, ...] | None = None,
                keypoints: Tensor | None = None) -> Detections:
        """Build without the checks, from fields that already passed them (rows taken from checked Detections):
        the per-frame paths build several Detections per frame, and the checks cost more than the rest."""
        out = object.__new__(cls)
        boxes, score, label, angle, track, mask, keypoint = _SLOT_SETTERS  # the slots' own setters: the fastest way
        boxes(out, boxes_xyxy)
        score(out, scores)
        label(out, labels)
        angle(out, angles_rad)
        track(out, track_ids)
        mask(out, masks)
        keypoint(out, keypoints)
        return out

    def __len__(self) -> int:
        return int(self.boxes_xyxy.shape[0])

    def __getitem__(self, keep: Tensor | slice) -> Detections:
        """Rows selected by a bool mask [N], an int64 index [K] or a slice."""
        rows: list[Any] = [None if (t := getattr(self, name)) is None else _rows_of(t, keep) for name in _FIELD_NAMES]
        return Detections.trusted(*rows)

    @property
    def oriented(self) -> bool:
        return self.angles_rad is not None

    def to(self, device: torch.device | str) -> Detections:
        """The same detections on another device (one copy per field)."""
        moved: dict[str, Any] = {f.name: None if (t := getattr(self, f.name)) is None
                                 else tuple(m.to(device) for m in t) if isinstance(t, tuple) else t.to(device)
                                 for f in fields(self)}
        return Detections(**moved)

    def with_track_ids(self, track_ids: Tensor) -> Detections:
        _expect(track_ids, "track_ids", (len(self),), torch.int64)
        if track_ids.device != self.boxes_xyxy.device:
            raise ValueError(f"track_ids on {track_ids.device}, detections on {self.boxes_xyxy.device}")
        return Detections.trusted(self.boxes_xyxy, self.scores, self.labels, self.angles_rad, track_ids, self.masks,
                                  self.keypoints)

    @classmethod
    def empty(cls, device: torch.device | str = "cpu", oriented: bool = False) -> Detections:
        return cls(
            boxes_xyxy=torch.zeros((0, 4), dtype=torch.float32, device=device),
            scores=torch.zeros((0,), dtype=torch.float32, device=device),
            labels=torch.zeros((0,), dtype=torch.int64, device=device),
            angles_rad=torch.zeros((0,), dtype=torch.float32, device=device) if oriented else None,
        )

    @classmethod
    def merge(cls, parts: list[Detections]) -> Detections:
        """Concatenate rows of several Detections (same optional fields, same device)."""
        if not parts:
            return cls.empty()
        joined: dict[str, Any] = {f.name: None if (first := getattr(parts[0], f.name)) is None
                                  else sum((getattr(p, f.name) for p in parts), ()) if isinstance(first, tuple)
                                  else torch.cat([getattr(p, f.name) for p in parts]) for f in fields(cls)}
        return cls(**joined)

    def split(self, counts: list[int]) -> list[Detections]:
        """Inverse of ``merge``: consecutive row groups of the given sizes (``counts`` must sum to ``len(self)``).

        One ``Tensor.split`` per field makes every group's views at once: slicing group by group cost a tenth of
        a batch's host time on the GPU machine."""
        columns = [repeat(None, len(counts)) if (t := getattr(self, name)) is None
                   else _split_tuple(t, counts) if isinstance(t, tuple) else t.split(counts) for name in _FIELD_NAMES]
        return list(map(Detections.trusted, *columns))


_FIELD_NAMES = tuple(f.name for f in fields(Detections))
_SLOT_SETTERS = tuple(getattr(Detections, name).__set__ for name in _FIELD_NAMES)


def _rows_of(field: Tensor | tuple[Tensor, ...], keep: Tensor | slice) -> Tensor | tuple[Tensor, ...]:
    """A field's rows for ``__getitem__``: tensors index directly, the masks' tuple by the same rows."""
    if not isinstance(field, tuple):
        return field[keep]
    if isinstance(keep, slice):
        return field[keep]
    index = keep.nonzero().flatten() if keep.dtype == torch.bool else keep
    return tuple(field[i] for i in index.tolist())


def _split_tuple(field: tuple[Tensor, ...], counts: list[int]) -> list[tuple[Tensor, ...]]:
    out, start = [], 0
    for c in counts:
        out.append(field[start:start + c])
        start += c
    return out


def to_host(dets: Detections, image_ids: Tensor | None = None) -> tuple[Detections, Tensor | None]:
    """``dets`` (and the image index of each row) on the CPU in one device-to-host copy: the fields are packed into
    one float64 tensor (exact for float32 values and for integers below 2**53), copied, and unpacked.

    Args:
        dets: N detections on any device.
        image_ids: optional ``[N]`` int64 on the same device.

    Returns:
        ``(dets, image_ids)`` on the CPU (``image_ids`` None when not given).
    """
    if dets.boxes_xyxy.device.type == "cpu":
        return dets, None if image_ids is None else image_ids.cpu()
    optional = [t for t in (image_ids, dets.angles_rad, dets.track_ids) if t is not None]
    kpts = dets.keypoints
    packed = torch.cat([dets.boxes_xyxy.double(), dets.scores.double()[:, None], dets.labels.double()[:, None],
                        *(t.double()[:, None] for t in optional),
                        *(() if kpts is None else (kpts.double().flatten(1),))], dim=1).cpu()
    extra = iter(packed[:, 6 : 6 + len(optional)].unbind(1))
    host_ids = next(extra).long() if image_ids is not None else None
    host = Detections(boxes_xyxy=packed[:, :4].float(), scores=packed[:, 4].float(), labels=packed[:, 5].long(),
                      angles_rad=next(extra).float() if dets.angles_rad is not None else None,
                      track_ids=next(extra).long() if dets.track_ids is not None else None,
                      masks=dets.masks,  # only host crops reach here: masks are assembled after this copy
                      keypoints=None if kpts is None else
                      packed[:, 6 + len(optional):].float().reshape(kpts.shape).contiguous())
    return host, host_ids
