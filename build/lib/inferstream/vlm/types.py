"""What pyvlm sends to a vision-language model and what comes back (no GStreamer, no torch)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferstream.errors import InferstreamError

if TYPE_CHECKING:
    import numpy as np


class VlmRequestError(InferstreamError):
    """One request failed (server down or garbage, prompt template, image too large); the video goes on.

    ``kind`` is a short stable category counted in the element's stats (``failed-<kind>``)."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The detection a crop came from: ODMtd id on its frame, track id (-1: untracked), label, box (x, y, w, h)
    in the frame's pixels."""

    od_id: int
    track_id: int
    label: str
    box_xywh: tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class VlmRequest:
    """One question about one or more images (a clip: several frames in time order).

    Attributes:
        images: uint8 ``[H, W, 3]`` RGB arrays, owned by the request (copies, not views of a mapped buffer).
        prompt: the rendered user text.
        stream_id, frame, pts_ns: the frame it describes (the last frame of a clip).
        obj: the object when the input is a crop, else None.
    """

    images: tuple[np.ndarray, ...]
    prompt: str
    stream_id: str
    frame: int
    pts_ns: int
    obj: ObjectRef | None = None
    json_schema: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class VlmAnswer:
    """The model's answer to ``request`` (``error`` set instead of ``text`` when it failed)."""

    request: VlmRequest
    text: str = ""
    error: VlmRequestError | None = None
    latency_s: float = 0.0
    json_value: Any = field(default=None)

    @property
    def ok(self) -> bool:
        return self.error is None


def render_prompt(template: str, *, stream_id: str, obj: ObjectRef | None) -> str:
    """``template`` with ``{stream_id}``, ``{label}`` and ``{track_id}`` filled in.

    Raises:
        VlmRequestError: kind ``prompt``, the template names an unknown field or is malformed.
    """
    try:
        return template.format(stream_id=stream_id, label=obj.label if obj else "",
                               track_id=obj.track_id if obj else -1)
    except (KeyError, IndexError, ValueError) as exc:
        raise VlmRequestError("prompt", f"prompt template {template!r} failed: {type(exc).__name__}: {exc} "
                                        "(known fields: {stream_id}, {label}, {track_id}; double braces for "
                                        "literal ones)") from exc
