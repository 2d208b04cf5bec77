"""pyosd: draws the GstAnalytics detections of each frame (boxes, rotated boxes, labels, confidences, track ids)
into the frame in place — nvdsosd's job on stock GStreamer. A thin shell: drawing lives in inferstream.ops.draw."""
from __future__ import annotations

from typing import TYPE_CHECKING

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import GObject, Gst, GstBase, GstVideo

from inferstream.elements import _props as props
from inferstream.elements._caps import system_video_caps, video_templates
from inferstream.elements._errors import post_error

if TYPE_CHECKING:
    from inferstream.detections import Detections
    from inferstream.frames.system import FrameFormat
    from inferstream.meta.gstanalytics import FrameMeta
    from inferstream.ops.draw import Color
    from inferstream.rawframe import RawFrame
    from inferstream.vlm.latest import LatestAnswers


class PyOsd(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyOsd"
    __gstmetadata__ = (
        "inferstream on-screen display",
        "Filter/Effect/Video",
        ("Draws the frame's GstAnalytics object detections: boxes, oriented boxes as rotated polygons, labels with "
         "confidence and track ids (stable colour per id), instance masks (alpha blend) and keypoint skeletons on "
         "system-memory video, in place"),
        "inferstream",
    )
    __gsttemplates__ = video_templates(system_video_caps())

    line_width = props.integer("Line width", "Box outline width in pixels", 2, 1, 64)
    font_scale = props.integer("Font scale", "Label glyph size: 7 x font-scale pixels high", 2, 1, 16)
    show_labels = props.boolean("Show labels", "Draw the label text above each box", True)
    show_confidence = props.boolean("Show confidence", "Append the confidence to the label", True)
    show_track_ids = props.boolean("Show track ids", "Append #id of tracked objects; colour by track id", True)
    show_vlm_answers = props.boolean("Show VLM answers", "Draw pyvlm's latest answer per stream (top left) and per "
                                     "tracked object (under its box; untracked: on the frame it rides on)", True)
    mask_alpha = props.number("Mask alpha", "Opacity of instance masks (0: not drawn)", 0.5, 0.0, 1.0)
    skeleton = props.string("Skeleton", "Limbs between keypoints: 'coco17', '' (dots only) or 0-based pairs "
                            "'a-b,c-d,...'", "coco17")
    keypoint_threshold = props.number("Keypoint threshold", "Draw keypoints scoring at least this", 0.5, 0.0, 1.0)

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)
        self._format: FrameFormat | None = None  # what mapping needs, read once per caps
        self._answers: LatestAnswers | None = None
        self._edges: tuple[tuple[int, int], ...] = ()  # the skeleton's limbs, read once per caps

    def do_set_caps(self, incaps: Gst.Caps, outcaps: Gst.Caps) -> bool:
        from inferstream.frames.system import frame_format

        try:
            self._edges = skeleton_edges(self.skeleton)
        except ValueError as exc:
            post_error(self, exc, "bad skeleton property")
            return False
        info = GstVideo.VideoInfo.new_from_caps(incaps)
        self._format = None if info is None else frame_format(info)
        return self._format is not None

    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        from inferstream.frames.system import mapped_frame
        from inferstream.meta.classifications import read_classifications
        from inferstream.meta.gstanalytics import read_detections
        from inferstream.ops.draw import draw_detections, id_color

        try:
            meta = read_detections(buf)
            notes = self._vlm_notes(buf, meta) if self.show_vlm_answers else []
            if (meta is None or len(meta.dets) == 0) and not notes:
                return Gst.FlowReturn.OK
            with mapped_frame(buf, self._format, writable=True) as frame:
                if meta is not None and len(meta.dets):
                    dets = meta.dets
                    tracks = dets.track_ids.tolist() if dets.track_ids is not None else [-1] * len(dets)
                    labels, scores = dets.labels.tolist(), dets.scores.tolist()
                    colors = [id_color(t if t >= 0 and self.show_track_ids else 1000 + lab)
                              for t, lab in zip(tracks, labels)]
                    texts = [self._text(meta.label_names[lab], score, t) for lab, score, t in zip(labels, scores, tracks)]
                    if self.show_labels:  # secondary classifiers' labels after the detector's
                        texts = [" ".join([text, *(c.label for c in cls)])
                                 for text, cls in zip(texts, read_classifications(buf, meta.od_ids))]
                    self._draw_instances(frame, dets, colors)
                    draw_detections(frame, dets.boxes_xyxy, dets.angles_rad, colors, texts, self.line_width,
                                    self.font_scale)
                self._draw_notes(frame, notes)
        except Exception as exc:  # the C boundary (R8)
            post_error(self, exc, "drawing failed")
            return Gst.FlowReturn.ERROR
        return Gst.FlowReturn.OK

    def _vlm_notes(self, buf: Gst.Buffer, meta: FrameMeta | None) -> list[tuple[str, int, int]]:
        """(text, x, y) of the answers to show: the stream's latest (top left) and each object's latest (under it)."""
        from inferstream.meta.vlm import read_answers
        from inferstream.vlm.latest import LatestAnswers

        if self._answers is None:
            self._answers = LatestAnswers()
        latest = self._answers
        fresh = read_answers(buf)
        for a in fresh:
            latest.update(a.text, a.track_id, bool(a.label) or a.track_id >= 0)
        notes = [(latest.frame_text, 0, 0)] if latest.frame_text else []
        if meta is None or len(meta.dets) == 0:
            return notes
        tracks = meta.dets.track_ids.tolist() if meta.dets.track_ids is not None else [-1] * len(meta.dets)
        untracked = {a.od_id: a.text for a in fresh if a.track_id < 0 and a.od_id >= 0}
        for od_id, track, (x1, _, _, y2) in zip(meta.od_ids, tracks, meta.dets.boxes_xyxy.int().tolist()):
            text = latest.for_track(track) or untracked.get(od_id)
            if text:
                notes.append((text, x1, y2))
        return notes

    def _draw_notes(self, frame: RawFrame, notes: list[tuple[str, int, int]]) -> None:
        from inferstream.ops.draw import draw_label

        scale = self.font_scale
        height = 9 * scale
        for text, x, y in notes:
            fit = max(1, frame.width // (6 * scale) - 1)
            draw_label(frame, text[:fit], x, y + height, scale, (255, 255, 255), (0, 0, 0))

    def _draw_instances(self, frame: RawFrame, dets: Detections, colors: list[Color]) -> None:
        """Masks under the boxes, skeletons on top of the masks, in each object's colour."""
        from inferstream.ops.draw import blend_mask, draw_skeleton

        if dets.masks is not None and self.mask_alpha > 0:
            origins = dets.boxes_xyxy[:, :2].round().int().tolist()
            for mask, (x, y), color in zip(dets.masks, origins, colors):
                blend_mask(frame, x, y, mask, color, self.mask_alpha)
        if dets.keypoints is not None:
            for kpts, color in zip(dets.keypoints, colors):
                draw_skeleton(frame, kpts, self._edges, color, self.keypoint_threshold, self.line_width)

    def _text(self, label: str, score: float, track_id: int) -> str:
        if not self.show_labels:
            return ""
        text = f"{label} {score:.2f}" if self.show_confidence else label
        return f"{text} #{track_id}" if track_id >= 0 and self.show_track_ids else text


def skeleton_edges(text: str) -> tuple[tuple[int, int], ...]:
    """The ``skeleton`` property as 0-based keypoint pairs."""
    from inferstream.ops.draw import COCO17_SKELETON

    text = text.strip()
    if text == "coco17":
        return COCO17_SKELETON
    try:
        return tuple((int(a), int(b)) for a, b in (pair.split("-") for pair in text.split(",") if pair.strip()))
    except ValueError as exc:
        raise ValueError(f"skeleton={text!r}: expected 'coco17', '' or pairs like '0-1,1-2'") from exc


GObject.type_register(PyOsd)
