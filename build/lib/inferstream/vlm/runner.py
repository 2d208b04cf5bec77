"""One stream's VLM logic, without GStreamer: which frames and objects to ask about, the prompt, building the
requests, and sending them (async: queued, never waiting; sync: answered before the frame moves on)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferstream.vlm.images import rgb_copy
from inferstream.vlm.select import ClipCollector, FrameSchedule, TrackSchedule
from inferstream.vlm.types import ObjectRef, VlmAnswer, VlmRequest, VlmRequestError, render_prompt

if TYPE_CHECKING:
    import numpy as np

    from inferstream.vlm.service import VlmClient

_TRACK_HORIZON_NS = 600 * 1_000_000_000  # tracks unseen this long are forgotten by the per-track schedule


@dataclass(frozen=True, slots=True)
class VlmSettings:
    """The element's scheduling and prompt properties, read once at start."""

    mode: str = "frame"  # frame | clip | objects
    every_frames: int = 30
    every_ns: int = 0
    clip_length: int = 4
    clip_stride: int = 1
    classes: frozenset[str] = frozenset()  # objects mode: only these labels (empty: all)
    new_tracks_only: bool = False
    track_every_ns: int = 0
    stream_prompts: dict[str, str] = field(default_factory=dict)
    json_schema: dict[str, Any] | None = None
    sync: bool = False


@dataclass(frozen=True, slots=True)
class FrameObject:
    """A detection on the current frame: ODMtd id, track id (-1: none), label, box (x1, y1, x2, y2) in pixels."""

    od_id: int
    track_id: int
    label: str
    box_xyxy: tuple[int, int, int, int]


class StreamRunner:
    """Schedules and sends the requests of one stream."""

    def __init__(self, settings: VlmSettings, client: VlmClient) -> None:
        self.settings, self.client = settings, client
        self._frames = FrameSchedule(settings.every_frames, settings.every_ns)
        self._tracks = TrackSchedule(settings.new_tracks_only, settings.track_every_ns)
        self._clip = ClipCollector(settings.clip_length, settings.clip_stride)

    def reset(self) -> None:
        """A new stream or a flush: schedules start again."""
        self._frames.reset()
        self._tracks.reset()
        self._clip.reset()

    def prompt_for(self, stream_id: str, default: str) -> str:
        return self.settings.stream_prompts.get(stream_id, default)

    def frame_due(self, frame: int, pts_ns: int) -> bool:
        """Whether frame/clip mode needs this frame's pixels (objects mode: always asks ``on_frame``)."""
        if self.settings.mode == "clip" and self._clip.collecting:
            return True
        return self.settings.mode == "objects" or self._frames.due(frame, pts_ns)

    def on_frame(self, *, stream_id: str, frame: int, pts_ns: int, pixels: np.ndarray, fmt: str,
                 objects: list[FrameObject], prompt: str) -> list[VlmAnswer]:
        """Build and send this frame's requests. Returns the answers for this frame in sync mode, else []."""
        template = self.prompt_for(stream_id, prompt)
        requests: list[VlmRequest] = []
        if self.settings.mode == "objects":
            frame_due = self._frames.due(frame, pts_ns)
            for obj in self._due_objects(objects, frame_due, pts_ns):
                ref = ObjectRef(obj.od_id, obj.track_id, obj.label, _xywh(obj.box_xyxy))
                self._add(requests, template, stream_id, frame, pts_ns, (rgb_copy(pixels, fmt, obj.box_xyxy),), ref)
        elif self.settings.mode == "clip":
            clip = self._clip.add(frame, rgb_copy(pixels, fmt))
            if clip is not None:
                self._add(requests, template, stream_id, frame, pts_ns, tuple(clip), None)  # type: ignore[arg-type]
        else:
            self._add(requests, template, stream_id, frame, pts_ns, (rgb_copy(pixels, fmt),), None)
        if self.settings.sync:
            return self.client.run_now(requests) if requests else []
        for req in requests:
            self.client.submit(req)
        return []

    def _due_objects(self, objects: list[FrameObject], frame_due: bool, pts_ns: int) -> list[FrameObject]:
        s = self.settings
        per_track = s.new_tracks_only or s.track_every_ns > 0
        out = []
        for obj in objects:
            if s.classes and obj.label not in s.classes:
                continue
            if per_track and obj.track_id >= 0:
                if self._tracks.due(obj.track_id, pts_ns):
                    out.append(obj)
            elif frame_due:
                out.append(obj)
        if per_track:
            self._tracks.forget_before(pts_ns, _TRACK_HORIZON_NS)
        return out

    def _add(self, requests: list[VlmRequest], template: str, stream_id: str, frame: int, pts_ns: int,
             images: tuple[np.ndarray, ...], obj: ObjectRef | None) -> None:
        try:
            prompt = render_prompt(template, stream_id=stream_id, obj=obj)
        except VlmRequestError as exc:
            self.client.reject(VlmAnswer(VlmRequest(images, template, stream_id, frame, pts_ns, obj), error=exc))
            return
        requests.append(VlmRequest(images, prompt, stream_id, frame, pts_ns, obj, self.settings.json_schema))


def _xywh(box: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = box
    return x1, y1, x2 - x1, y2 - y1
