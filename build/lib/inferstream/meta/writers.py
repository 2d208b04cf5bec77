"""Which metadata a stream's results are written as, chosen by the memory its frames come in (the runner holds the
writer; nothing here decides what to infer):

- system and CUDA memory: GstAnalytics (``AnalyticsWriter``: ODMtds, masks / keypoints, ClsMtds), one frame per
  buffer;
- NVMM (DeepStream): ``NvDsObjectMeta`` as nvinfer writes it, for the whole muxed batch a buffer holds
  (``meta.nvds.infer_nvmm_batch``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gi.repository import Gst

    from inferstream.detections import Detections

class AnalyticsWriter:
    """GstAnalytics writer of one producer (``unique_id``); label quarks looked up once per label table (R12).

    Raises (at construction):
        OSError, AttributeError: no usable GstAnalytics (>= 1.26); NVMM input, written as NvDs metadata, still
            works then.
    """

    def __init__(self, unique_id: int, warn: Callable[[Exception, str], None] | None = None) -> None:
        """``warn(error, text)``: how the owner reports what this GStreamer cannot carry (said once)."""
        from inferstream.meta.gstanalytics import producer_quark
        from inferstream.native.analytics import loops as analytics_loops

        self.producer = producer_quark(unique_id)
        analytics_loops()  # build or load the compiled loops now, not while the first batch waits
        self._quarks: dict[tuple[str, ...], list[int]] = {}
        self._warn = warn
        self._told_keypoints = False

    def label_quarks(self, labels: tuple[str, ...]) -> list[int]:
        quarks = self._quarks.get(labels)
        if quarks is None:
            from inferstream.meta.gstanalytics import label_quarks

            quarks = self._quarks[labels] = label_quarks(labels)
        return quarks

    def detections(self, buf: Gst.Buffer, dets: Detections, labels: tuple[str, ...]) -> None:
        """ODMtds for ``dets`` (CPU, frame pixels), and the masks and keypoints they carry."""
        from inferstream.meta.gstanalytics import write_detections

        ids = write_detections(buf, dets, self.label_quarks(labels), self.producer)
        if dets.masks is not None or dets.keypoints is not None:
            from inferstream.meta.instances import keypoints_supported, write_instances

            write_instances(buf, dets, ids)
            if dets.keypoints is not None and not self._told_keypoints and not keypoints_supported():
                self._told_keypoints = True  # GStreamer 1.26: masks are written, keypoints cannot be
                if self._warn is not None:
                    from gi.repository import Gst

                    from inferstream.errors import MetaWriteError

                    self._warn(MetaWriteError("no GstAnalyticsTensorMtd, new in GStreamer 1.28"),
                               f"keypoints not written on {Gst.version_string()}")

    def classifications(self, buf: Gst.Buffer, od_ids: Sequence[int], classes: Sequence[int],
                        scores: Sequence[float], labels: tuple[str, ...], producer: Sequence[int]) -> None:
        """One ClsMtd per object (``od_ids``), related from its ODMtd; ``classes`` index into ``labels``."""
        from inferstream.meta.classifications import write_classifications

        write_classifications(buf, od_ids, classes, scores, self.label_quarks(labels), producer)
