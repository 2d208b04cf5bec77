"""Per-frame cost of pytracker's ByteTrack update and of pyosd's drawing at 50 objects (CPU, one run).

    python bench/osd_tracker_cost.py

Tracker: 50 objects moving on a 1920x1080 frame, 300 frames, ``ByteTrack.update`` per frame (plus the GstAnalytics
read/write that the element adds, measured on a real buffer). OSD: ``draw_detections`` of 50 labelled boxes (every
5th rotated) on 1080p RGB and NV12 frames.
"""
from __future__ import annotations

import statistics
import time

import gi
import torch

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from pyinfer_cpu import publish

from inferstream.detections import Detections
from inferstream.meta.gstanalytics import label_quarks, producer_quark, read_detections, write_detections
from inferstream.meta.tracks import TrackRecord, write_tracks
from inferstream.ops.draw import draw_detections, id_color
from inferstream.rawframe import RawFrame
from inferstream.tracking import make_tracker

N, W, H, FRAMES = 50, 1920, 1080, 300


def _scene(i: int, gen: torch.Generator, start: torch.Tensor, vel: torch.Tensor) -> Detections:
    xy = (start + vel * i) % torch.tensor([W - 80.0, H - 160.0])
    boxes = torch.cat([xy, xy + torch.tensor([60.0, 140.0])], dim=1) + torch.randn(N, 4, generator=gen)
    return Detections(boxes_xyxy=boxes, scores=0.5 + 0.5 * torch.rand(N, generator=gen),
                      labels=torch.zeros(N, dtype=torch.int64))


def _ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def main() -> None:
    Gst.init(None)
    gen = torch.Generator().manual_seed(0)
    start, vel = torch.rand(N, 2, generator=gen) * torch.tensor([W, H]), torch.randn(N, 2, generator=gen) * 4
    scenes = [_scene(i, gen, start, vel) for i in range(FRAMES)]
    tracker = make_tracker("bytetrack", min_hits=1)
    t_track, t_meta = [], []
    quarks, producer = label_quarks(["person"]), producer_quark(1)
    for i, dets in enumerate(scenes):
        buf = Gst.Buffer.new_allocate(None, 16, None)
        write_detections(buf, dets, quarks, producer)
        t0 = time.perf_counter()
        meta = read_detections(buf)
        t1 = time.perf_counter()
        result = tracker.update(meta.dets, i * 33_333_333)
        t2 = time.perf_counter()
        write_tracks(buf, [TrackRecord(meta.od_ids[t.row], t.track_id, t.first_seen_ns, t.last_seen_ns, False)
                           for t in result.tracks if not t.predicted])
        t3 = time.perf_counter()
        t_track.append(t2 - t1)
        t_meta.append((t1 - t0) + (t3 - t2))
    dets = scenes[-1]
    angles = torch.where(torch.arange(N) % 5 == 0, torch.tensor(0.5), torch.tensor(0.0))
    texts = [f"person 0.{80 + i % 20} #{i + 1}" for i in range(N)]
    colors = [id_color(i + 1) for i in range(N)]
    rows = []
    for fmt in ("RGB", "NV12"):
        planes = ((torch.zeros(H, W, 3, dtype=torch.uint8),) if fmt == "RGB" else
                  (torch.zeros(H, W, dtype=torch.uint8), torch.zeros(H // 2, W // 2, 2, dtype=torch.uint8)))
        frame = RawFrame(fmt, W, H, planes)
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            draw_detections(frame, dets.boxes_xyxy, angles, colors, texts)
            times.append(time.perf_counter() - t0)
        rows.append((fmt, _ms(times)))
    lines = [f"{N} objects, 1920x1080, CPU ({torch.get_num_threads()} torch threads), median per frame", "",
             "| stage | ms per frame |", "|---|---|",
             f"| pytracker: ByteTrack update ({FRAMES} frames) | {_ms(t_track):.2f} |",
             f"| pytracker: read ODMtds + write TrackingMtds | {_ms(t_meta):.2f} |"]
    lines += [f"| pyosd: draw 50 boxes (10 rotated) + labels, {fmt} | {ms:.2f} |" for fmt, ms in rows]
    publish("osd_tracker_cost", lines)


if __name__ == "__main__":
    main()
