"""The message for one VLM answer (pymsgconv adds one per ``inferstream-vlm-answer`` meta, on every frame that
carries one, whatever the frame-interval): schema ``inferstream.vlm-answer/1``."""
from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferstream.meta.vlm import AnswerMeta


def vlm_answer_document(answer: AnswerMeta, *, source_id: int, timestamp: str) -> dict[str, Any]:
    """``{schema, messageid, @timestamp, stream_id, source_id, frame, pts_ns, text, json, object}``: ``frame`` and
    ``pts_ns`` are those of the frame the answer describes; ``object`` is null for whole-frame answers, else its
    label, track id (-1: untracked) and bbox ``[x, y, w, h]`` in that frame's pixels."""
    obj = None
    if answer.label or answer.track_id >= 0:
        obj = {"label": answer.label, "track_id": answer.track_id, "bbox": list(answer.box_xywh)}
    return {"schema": "inferstream.vlm-answer/1", "messageid": str(uuid.uuid4()), "@timestamp": timestamp,
            "stream_id": answer.stream_id, "source_id": source_id, "frame": answer.frame, "pts_ns": answer.pts_ns,
            "text": answer.text, "json": json.loads(answer.json) if answer.json else None, "object": obj}
