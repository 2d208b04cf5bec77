"""Stage timers installed by monkeypatching (bench only; product code is unchanged)."""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any


class StageTimers:
    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.total: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.armed = False  # set by the first frame: model loading, warm-up and graph capture are not counted

    def add(self, name: str, dt: float) -> None:
        if not self.armed:
            return
        with self.lock:
            self.total[name] += dt
            self.count[name] += 1

    def timed(self, name: str, fn: Callable[..., Any], sync: bool = False) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if name.startswith("thread: BatchGroup"):
                self.armed = True
            if sync:
                sync_device()
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if sync:
                    sync_device()
                self.add(name, time.perf_counter() - t)
        return wrapper

    def timed_map(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @contextlib.contextmanager
        def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            t = time.perf_counter()
            cm = fn(*args, **kwargs)
            frame = cm.__enter__()
            self.add("thread: map enter", time.perf_counter() - t)
            try:
                yield frame
            except BaseException:
                if not cm.__exit__(*sys.exc_info()):
                    raise
            else:
                t = time.perf_counter()
                cm.__exit__(None, None, None)
                self.add("thread: map exit", time.perf_counter() - t)
        return wrapper

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        import inferstream.frames.cuda as fcuda
        import inferstream.frames.system as fsystem
        import inferstream.meta.gstanalytics as meta
        from inferstream import detections, inference
        from inferstream.backends.torch_backend import TorchBackend
        from inferstream.batching import BatchGroup
        from inferstream.models import yolo
        from inferstream.models.yolo import AnchorFreeDecoder
        from inferstream.ops import letterbox
        from inferstream.tracking.bytetrack import ByteTrack

        s = self.sync
        patches = [
            (letterbox, "preprocess_batch", lambda f: self.timed("leader: preprocess (colour+letterbox)", f, s)),
            (letterbox, "to_rgb_nchw", lambda f: self.timed("leader: - colour conversion (to_rgb_nchw)", f, s)),
            (letterbox, "_resize", lambda f: self.timed("leader: - resize (cv2-exact bilinear)", f, s)),
            (letterbox, "resize_rgb_into", lambda f: self.timed("leader: - fast resize + colour (CUDA)", f, s)),
            (yolo, "nms_xyxy", lambda f: self.timed("leader: - NMS (torchvision, batched)", f, s)),
            (TorchBackend, "__call__", lambda f: self.timed("leader: model forward", f, s)),
            (AnchorFreeDecoder, "flat", lambda f: self.timed("leader: decode + NMS", f, s)),
            (detections, "to_host", lambda f: self.timed("leader: detections to host", f, s)),
            (inference.ModelStep, "infer", lambda f: self.timed("leader: Detector.infer total", f, s)),
            (BatchGroup, "infer", lambda f: self.timed("thread: BatchGroup.infer (wait + share of batch)", f)),
            (fcuda, "mapped_cuda_frame", self.timed_map),
            (fsystem, "mapped_frame", self.timed_map),
            (meta, "write_detections", lambda f: self.timed("thread: write_detections", f)),
            (meta, "read_detections", lambda f: self.timed("thread: read_detections (tracker)", f)),
            (meta, "write_tracks", lambda f: self.timed("thread: write_tracks", f)),
            (ByteTrack, "update", lambda f: self.timed("thread: ByteTrack.update", f)),
        ]
        saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
        for obj, name, make in patches:
            setattr(obj, name, make(getattr(obj, name)))
        try:
            yield
        finally:
            for obj, name, orig in saved:
                setattr(obj, name, orig)

    def report(self, res: dict[str, Any]) -> dict[str, Any]:
        frames = max(int(res.get("frames", 0)), 1)
        wall = res.get("wall_s", 1.0)
        out = {}
        for name in sorted(self.total):
            out[name] = {"calls": self.count[name], "ms_per_call": round(1e3 * self.total[name] / self.count[name], 3),
                         "us_per_frame": round(1e6 * self.total[name] / frames, 1),
                         "share_of_wall": round(self.total[name] / wall, 3)}
        return out




def sync_device() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
