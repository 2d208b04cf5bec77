"""Write Detections as DeepStream ``NvDsObjectMeta``, field for field as nvinfer does, through pyservicemaker.

The values come from ``meta.nvds_fields`` (pure, unit-tested); this module only copies them into objects
acquired from the batch's pool (``BatchMetadata.acquire_object_meta``) and appends them to their frame, then sets
each inferred frame's ``bInferDone`` (``meta._nvds_c``: pyservicemaker has no setter). pyservicemaker is imported
on the first write, never at import.

What pyservicemaker does not let Python write, and so is left as the pool hands it out:

- ``detector_bbox_info.org_bbox_coords`` (nvinfer copies ``rect_params`` there; nvtracker does not read it; the
  binding's ``nv_bbox_info`` is the tracker's box, not this one);
- classifier metadata (``NvDsClassifierMeta`` / label info cannot be created from Python), so secondary
  classifications do not reach nvdsosd or nvmsgconv as nvinfer's would;
- ``NVDS_EVENT_MSG_META``: nvinfer does not write it either; run ``nvmsgconv msg2p-newapi=1`` (it walks the
  object metas) or attach ``acquire_event_message_meta().generate(obj, frame)`` in your own probe.

``text_params.display_text`` is set once per object, on a fresh object from the pool: the binding's setter
``delete[]``s the old text and allocates with ``new[]``, while DeepStream's components allocate it with
``g_strdup`` and free it with ``g_free`` / ``free`` (nvtracker) when the meta is released; rewriting a text that
another component allocated would mix the two allocators.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from inferstream.frames.nvmm import mapped_nvmm_batch
from inferstream.meta._nvds_c import set_infer_done
from inferstream.meta.nvds_fields import TEXT_BG_COLOR, TEXT_COLOR, TEXT_SIZE, ObjectFields, object_fields

if TYPE_CHECKING:
    from gi.repository import Gst

    from inferstream.detections import Detections
    from inferstream.rawframe import RawFrame

# frames -> (their detections, the model's labels); e.g. BatchGroup.infer_batch bound to the decode params
InferBatch = Callable[[list["RawFrame"]], tuple[list["Detections"], Sequence[str]]]


def fill_object(obj: Any, f: ObjectFields, osd: Any) -> None:
    """Copy ``f`` into a pyservicemaker ``ObjectMetadata`` (``osd``: the ``pyservicemaker.osd`` module)."""
    obj.unique_component_id = f.unique_component_id
    obj.class_id = f.class_id
    obj.object_id = f.object_id
    obj.confidence = f.confidence
    obj.label = f.label
    rect = obj.rect_params  # a reference into the C struct: attribute writes land in the meta
    rect.left, rect.top, rect.width, rect.height = f.left, f.top, f.width, f.height
    rect.rotation_angle = f.rotation_angle_deg
    rect.border_width = f.border_width
    rect.border_color = osd.Color(*f.border_color)
    rect.has_bg_color = int(f.has_bg_color)
    rect.bg_color = osd.Color(*f.bg_color)
    text = obj.text_params
    text.display_text = f.display_text  # once (see the module docstring)
    text.x_offset, text.y_offset = f.text_x, f.text_y
    text.font_params.name = osd.FontFamily.Serif  # the binding's only font: nvinfer's static "Serif"
    text.font_params.size = TEXT_SIZE
    text.font_params.color = osd.Color(*TEXT_COLOR)
    text.set_bg_clr = 1
    text.text_bg_clr = osd.Color(*TEXT_BG_COLOR)


def infer_nvmm_batch(buf: Gst.Buffer, infer: InferBatch, unique_id: int) -> int:
    """Infer every frame of an nvstreammux buffer in one batch and write the objects as nvinfer would.

    Returns:
        The number of objects written.

    Raises:
        UnsupportedFormatError: not a muxed batch, or surfaces that are not HWC RGB/RGBA.
        MetaWriteError: ``bInferDone`` cannot be set (DeepStream's metadata libraries do not load).
    """
    from pyservicemaker import osd  # type: ignore[import-not-found]  # DeepStream only

    written = 0
    with mapped_nvmm_batch(buf) as (batch_meta, slots, frames):
        dets, labels = infer(frames)
        for (slot, frame_meta), frame, frame_dets in zip(slots, frames, dets):
            for fields in object_fields(frame_dets, labels, (frame.width, frame.height), slot.muxer_size,
                                        unique_id):
                obj = batch_meta.acquire_object_meta()
                fill_object(obj, fields, osd)
                frame_meta.append(obj)
                written += 1
    set_infer_done(buf, {slot.batch_id for slot, _ in slots})
    return written
