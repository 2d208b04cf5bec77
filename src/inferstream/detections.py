"""The one result type that flows from models/ through tracking/ to meta/ writers."""
from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import repeat
from typing import TYPE_CHECKING

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
    """

    boxes_xyxy: Tensor  # float32 [N, 4]
    scores: Tensor  # float32 [N]
    labels: Tensor  # int64 [N], index into the model's label list
    angles_rad: Tensor | None = None  # float32 [N], oriented boxes only
    track_ids: Tensor | None = None  # int64 [N], -1 = not tracked; set by tracking/

    def __post_init__(self) -> None:
        n = self.boxes_xyxy.shape[0] if self.boxes_xyxy.ndim == 2 else -1
        _expect(self.boxes_xyxy, "boxes_xyxy", (n, 4), torch.float32)
        _expect(self.scores, "scores", (n,), torch.float32)
        _expect(self.labels, "labels", (n,), torch.int64)
        if self.angles_rad is not None:
            _expect(self.angles_rad, "angles_rad", (n,), torch.float32)
        if self.track_ids is not None:
            _expect(self.track_ids, "track_ids", (n,), torch.int64)
        devices = {t.device for t in (getattr(self, f.name) for f in fields(self)) if t is not None}
        if len(devices) > 1:
            raise ValueError(f"all fields must share one device, got {sorted(map(str, devices))}")

    @classmethod
    def trusted(cls, boxes_xyxy: Tensor, scores: Tensor, labels: Tensor, angles_rad: Tensor | None = None,
                track_ids: Tensor | None = None) -> Detections:
        """Build without the checks, from fields that already passed them (rows taken from checked Detections):
        the per-frame paths build several Detections per frame, and the checks cost more than the rest."""
        out = object.__new__(cls)
        for name, value in zip(_FIELD_NAMES, (boxes_xyxy, scores, labels, angles_rad, track_ids)):
            object.__setattr__(out, name, value)
        return out

    def __len__(self) -> int:
        return int(self.boxes_xyxy.shape[0])

    def __getitem__(self, keep: Tensor | slice) -> Detections:
        """Rows selected by a bool mask [N], an int64 index [K] or a slice."""
        return Detections.trusted(*(None if (t := getattr(self, name)) is None else t[keep] for name in _FIELD_NAMES))

    @property
    def oriented(self) -> bool:
        return self.angles_rad is not None

    def to(self, device: torch.device | str) -> Detections:
        """The same detections on another device (one copy per field)."""
        return Detections(
            **{f.name: None if (t := getattr(self, f.name)) is None else t.to(device) for f in fields(self)}
        )

    def with_track_ids(self, track_ids: Tensor) -> Detections:
        _expect(track_ids, "track_ids", (len(self),), torch.int64)
        if track_ids.device != self.boxes_xyxy.device:
            raise ValueError(f"track_ids on {track_ids.device}, detections on {self.boxes_xyxy.device}")
        return Detections.trusted(self.boxes_xyxy, self.scores, self.labels, self.angles_rad, track_ids)

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
        return cls(**{f.name: None if getattr(parts[0], f.name) is None
                      else torch.cat([getattr(p, f.name) for p in parts]) for f in fields(cls)})

    def split(self, counts: list[int]) -> list[Detections]:
        """Inverse of ``merge``: consecutive row groups of the given sizes (``counts`` must sum to ``len(self)``).

        One ``Tensor.split`` per field makes every group's views at once: slicing group by group cost a tenth of
        a batch's host time on the GPU machine."""
        columns = [repeat(None, len(counts)) if (t := getattr(self, name)) is None else t.split(counts)
                   for name in _FIELD_NAMES]
        return list(map(Detections.trusted, *columns))


_FIELD_NAMES = tuple(f.name for f in fields(Detections))
