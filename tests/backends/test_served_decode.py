"""Decoding at the model server (``model_server.decoding``): a worker's ModelStep on a served model gets its rows
decoded by the server, once per forward for every worker that shares the decoder and thresholds.

A real server process, real models (random-weight YOLO11n, YOLO26n end-to-end, YOLO11n-OBB and -pose: hundreds
of candidates over 80 classes, keypoints, the hard case for NMS; the colour-blob detector where exact positions matter) and real
vtest frames. The reference is the worker's own decoding of the same server's raw outputs (the path before this
one), which must agree bit for bit; and each frame's rows must be its own, with its own worker's thresholds.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from parity import decode_frames, random_yolo_checkpoints

from backends.test_served import CARRIED, DEVICES, serving
from inferstream.backends.served import ServedBackend
from inferstream.detections import Detections
from inferstream.errors import InferenceServerError
from inferstream.inference import InferConfig, ModelStep
from inferstream.models.base import DecodeParams
from inferstream.rawframe import RawFrame

NAMES = ("yolo11n", "yolo26n", "yolo11n-obb", "yolo11n-pose")
HARD = DecodeParams(conf=0.05, iou=0.5, max_det=300)  # hundreds of candidates per frame on random weights
VARIANTS = [pytest.param(HARD, id="low-conf"),
            pytest.param(DecodeParams(conf=0.1, max_det=7, agnostic=True), id="agnostic-max-det-7"),
            pytest.param(DecodeParams(conf=0.05, classes=(0, 2, 7, 10, 18, 32, 41, 64), class_conf=((7, 0.3),)), id="classes")]


def _rgb(img: np.ndarray) -> RawFrame:
    img = np.ascontiguousarray(img)
    return RawFrame("RGB", img.shape[1], img.shape[0], (torch.from_numpy(img),))


@pytest.fixture(scope="module")
def vtest_frames(vtest: Path) -> list[RawFrame]:
    return [_rgb(f) for f in decode_frames(f"filesrc location={vtest} ! decodebin", 40)[::8]]


@pytest.fixture(scope="module")
def random_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return random_yolo_checkpoints(tmp_path_factory.mktemp("random"), list(enumerate(NAMES)))


def _steps(spec: str, cfg: InferConfig) -> tuple[ModelStep, ModelStep]:
    """Two ModelSteps on one server: one it decodes for, and one that decodes the raw outputs itself (the
    reference: the path a worker took before)."""
    decoded, raw = ModelStep(cfg), ModelStep(cfg)
    assert decoded.decodes_at_server
    raw.decodes_at_server = False
    return decoded, raw


def _assert_equal(got: list[Detections], want: list[Detections]) -> None:
    assert [len(d) for d in got] == [len(d) for d in want]
    for g, w in zip(got, want):
        for name in ("boxes_xyxy", "scores", "labels", "angles_rad", "keypoints"):
            a, b = getattr(g, name), getattr(w, name)
            assert (a is None) == (b is None), name
            assert a is None or torch.equal(a, b), name


@pytest.mark.parametrize("params", VARIANTS)
@pytest.mark.parametrize("name", NAMES)
def test_rows_decoded_at_the_server_equal_the_workers_own_decoding(
        tmp_path: Path, random_models: dict[str, Path], vtest_frames: list[RawFrame], name: str,
        params: DecodeParams) -> None:
    """Five vtest frames in a batch, then two and one: the same rows, scores, classes and angles as the worker's
    own decoding of the raw outputs, frame by frame (at 640x480, the rectangle a CPU model runs vtest at)."""
    model = str(random_models[name])
    with serving(tmp_path, model, "cpu", "--trust-checkpoint") as (spec, _):
        decoded, raw = _steps(spec, InferConfig(model=spec, params=params))
        total = 0
        for frames in (vtest_frames[:5], vtest_frames[3:5], vtest_frames[:1]):
            got = decoded.infer(frames)
            _assert_equal(got, raw.infer(frames))
            total += sum(len(d) for d in got)
        assert total >= 3 * 7, f"too few rows to tell anything: {total}"
        assert (got[0].angles_rad is not None) == name.endswith("obb")
        assert (got[0].keypoints is not None) == name.endswith("pose")
        decoded.close()
        raw.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_rows_decoded_at_the_server_equal_the_workers_own_decoding(tmp_path: Path) -> None:
    """The GPU machine's YOLO11s (random weights, calibrated to tens of rows a frame on the moving SMPTE pattern;
    on smooth noise it finds nothing) behind a server with CUDA graphs, on 1080p frames of that pattern: the rows it
    decodes on its own stream, beside the next forward, equal the worker's own decoding of the raw outputs."""
    if not CARRIED.is_file():
        pytest.skip("needs the GPU machine's carried model (bench/gpu/make_model.py)")
    smpte = decode_frames("videotestsrc pattern=smpte horizontal-speed=7 num-buffers=160 ! "
                          "video/x-raw,width=1920,height=1080", 160)
    frames = [_rgb(f) for f in smpte[::20]]
    with serving(tmp_path, str(CARRIED), "cuda") as (spec, _):
        decoded, raw = _steps(spec, InferConfig(model=spec, device="cuda", params=HARD))
        for batch in (frames, frames[2:5], frames):
            got = decoded.infer(batch)
            _assert_equal(got, raw.infer(batch))
        assert sum(len(d) for d in got) >= 8 * 7
        decoded.close()
        raw.close()


def _squares(k: int, n: int) -> list[RawFrame]:
    """``n`` frames for worker ``k``: red, green and blue squares at places unique to (worker, frame)."""
    frames = []
    for i in range(n):
        img = torch.zeros((240, 320, 3), dtype=torch.uint8)
        for c in range(3):
            x, y = 10 + 30 * c + 8 * i, 20 + 60 * c + 12 * k
            img[y:y + 40, x:x + 40, c] = 255
        frames.append(RawFrame("RGB", 320, 240, (img,)))
    return frames


def _where(frames: list[RawFrame], classes: tuple[int, ...]) -> list[list[list[float]]]:
    """The squares' boxes in frame pixels, per frame, for ``classes`` (the blob detector's answer)."""
    out = []
    for f in frames:
        img = f.planes[0]
        boxes = []
        for c in classes:
            ys, xs = (img[:, :, c] == 255).nonzero(as_tuple=True)
            boxes.append([float(xs.min()), float(ys.min()), float(xs.max()) + 1, float(ys.max()) + 1])
        out.append(boxes)
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_one_forward_decodes_each_workers_rows_with_its_own_thresholds(tmp_path: Path, device: str) -> None:
    """Three workers ask at once and run as one forward: two have their rows decoded (one all classes, one green
    only: two groups), the third takes the raw outputs. Every frame gets its own squares, with its own worker's
    thresholds, and the raw worker the model's own outputs."""
    with serving(tmp_path, "blobs:color_blob_detector", device, "--delay-ms", "20000") as (spec, proc):
        configs = [InferConfig(model=spec, family="yolo-end2end", device=device, input_size=(240, 320)),
                   InferConfig(model=spec, family="yolo-end2end", device=device, input_size=(240, 320),
                               params=DecodeParams(classes=(1,)))]
        steps = [ModelStep(cfg) for cfg in configs]
        raw = ServedBackend(spec, torch.device(device))
        for step in steps:
            step.backend.warmup(3, (240, 320))
        raw.warmup(2, (240, 320))
        frames = [_squares(k, 3) for k in range(2)]
        raw_in = torch.rand((2, 3, 240, 320), generator=torch.Generator().manual_seed(3)).to(device)
        results: dict[int, Any] = {}

        def ask(k: int) -> None:
            results[k] = steps[k].infer(frames[k]) if k < 2 else [o.clone() for o in raw(raw_in.to(raw.dtype))]

        threads = [threading.Thread(target=ask, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for k, classes in ((0, (0, 1, 2)), (1, (1,))):
            got = [d.boxes_xyxy.tolist() for d in results[k]]
            assert got == _where(frames[k], classes), f"worker {k}"
            assert [d.labels.tolist() for d in results[k]] == [list(classes)] * 3
        from blobs import color_blob_detector

        torch.testing.assert_close(results[2][0].float(), color_blob_detector()(raw_in.float()), atol=1e-3, rtol=0)
        for step in steps:
            step.close()
        raw.close()
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    # each ModelStep's dummy forward at start (one frame), then the three workers' 8 frames as one forward
    assert '"forwards": 3, "frames": 10' in out.strip().splitlines()[-1], (out, err)


BREAKS_ON_FRAMES = """
import torch
from blobs import ColorBlobDetector


class LosesAColumn(ColorBlobDetector):
    def forward(self, x):
        out = super().forward(x)
        return out[:, :, :5] if bool(x.amax() > 0) else out  # the warm-up's blank frames pass


def make():
    return LosesAColumn()
"""


def test_rows_the_server_cannot_decode_are_that_requests_error_and_the_server_goes_on(tmp_path: Path) -> None:
    """Outputs that leave the family's layout after warm-up: the worker hears why its rows could not be decoded,
    and its next batch is answered."""
    model = tmp_path / "breaks.py"
    model.write_text(BREAKS_ON_FRAMES)
    with serving(tmp_path, f"{model}:make", "cpu") as (spec, proc):
        step = ModelStep(InferConfig(model=spec, family="yolo-end2end", input_size=(240, 320)))
        step.warmup(2)
        with pytest.raises(InferenceServerError, match=r"decoding failed: ValueError: yolo-end2end: expected a float "
                                                        r"output \(B, K, 6\)"):
            step.infer(_squares(0, 2))
        blank = [RawFrame("RGB", 320, 240, (torch.zeros((240, 320, 3), dtype=torch.uint8),))]
        assert [len(d) for d in step.infer(blank)] == [0]
        step.close()
        assert proc.poll() is None


def test_a_family_that_does_not_fit_the_outputs_is_refused_at_registration(tmp_path: Path, person_pt: Path) -> None:
    """Rows need a family first, and the family must fit the model's outputs: each a clear error, before sending
    or at registration, and the raw outputs still work."""
    with serving(tmp_path, str(person_pt), "cpu", "--trust-checkpoint") as (spec, _):
        backend = ServedBackend(spec)
        with pytest.raises(InferenceServerError, match="submit_decoded before decode_at_server"):
            backend.submit_decoded(torch.zeros((1, 3, 64, 64)), DecodeParams())
        backend.decode_at_server("yolo-end2end")  # the person detector's head is (1, 4 + nc, A)
        with pytest.raises(InferenceServerError, match=r"yolo-end2end.*expected .*\(B, K, 6\)"):
            backend.warmup(1, (64, 64))
        backend.decode_at_server(None)
        assert backend(torch.zeros((1, 3, 64, 64)))[0].shape[::2] == (1, 84)  # 84 anchors at 64x64
        backend.close()


def test_masks_stay_with_the_worker() -> None:
    """A segmentation model's masks are assembled at frame resolution by the worker: its family is not decoded at
    the server, and a worker's ModelStep does not ask."""
    from inferstream.backends.base import ModelInfo
    from inferstream.model_server.decoding import Decoders

    shapes = [(1, 116, 8400), (1, 32, 160, 160)]
    with pytest.raises(ValueError, match="yolo-seg is decoded by the worker"):
        Decoders(ModelInfo(task="segment")).get("yolo-seg", shapes, 640, 640)
    assert Decoders(ModelInfo()).get("yolo", [(1, 84, 8400)], 640, 640).num_classes == 80


def test_forwards_that_end_while_the_decoding_thread_is_busy_are_decoded_in_one_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server in this process, three workers: the first worker's rows are held in decoding while the other two
    are forwarded; once let go, one decoding call takes both of theirs, and every worker gets its own frames' squares.
    One call per forward made the decoding thread the limit of a fast model's short forwards (BENCHMARKS.md,
    *Twenty-fifth session*)."""
    from multiprocessing.connection import Listener

    from inferstream import model_server
    from inferstream.backends.loader import load_backend

    server = model_server.ModelServer(load_backend("blobs:color_blob_detector", device="cpu"))
    listener = Listener(str(tmp_path / "model.sock"), family="AF_UNIX")
    serving_thread = threading.Thread(target=server.serve, args=(listener,), daemon=True)
    serving_thread.start()
    spec = f"ipc://{tmp_path / 'model.sock'}"
    steps = [ModelStep(InferConfig(model=spec, family="yolo-end2end", input_size=(240, 320))) for _ in range(3)]
    for step in steps:
        step.backend.warmup(2, (240, 320))
    decoded = server.decodes
    calls: list[int] = []  # jobs per decoding call from here on
    release = threading.Event()
    together = model_server.decode_together

    def held(groups: Any, stream: Any) -> Any:
        calls.append(sum(len(group.jobs) for group in groups))
        release.wait(30)
        return together(groups, stream)

    monkeypatch.setattr(model_server, "decode_together", held)
    frames = [_squares(k, 2) for k in range(3)]
    results: dict[int, list[Detections]] = {}
    threads = [threading.Thread(target=lambda k=k: results.update({k: steps[k].infer(frames[k])})) for k in range(3)]
    threads[0].start()
    deadline = time.monotonic() + 30
    while not calls and time.monotonic() < deadline:  # the first worker's rows are in the held call
        time.sleep(0.01)
    for t in threads[1:]:
        t.start()
    while sum(len(f.jobs) for f in server._to_decode) < 2 and time.monotonic() < deadline:  # both forwarded, waiting
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(30)
    server.stop()
    serving_thread.join(30)
    for step in steps:
        step.close()
    assert calls == [1, 2]
    assert server.decodes - decoded == 2
    for k in range(3):
        assert [d.boxes_xyxy.tolist() for d in results[k]] == _where(frames[k], (0, 1, 2)), f"worker {k}"
