"""inference.ModelStep directly (no GStreamer, no pipeline): a batch of frames in, per-frame Detections in each
frame's own pixels out; what it refuses at load. Real models: tests/blobs.py (finds coloured squares, so the
expected boxes are the squares drawn) and tests/classifier_models.py."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from inferstream.detections import Detections
from inferstream.errors import ConfigError, UnsupportedModelError
from inferstream.inference import InferConfig, ModelStep, load_model_step
from inferstream.models.base import DecodeParams, PreprocessOverride
from inferstream.rawframe import RawFrame

BLOBS = InferConfig(model="blobs:color_blob_detector", family="yolo-end2end", labels=("red", "green", "blue"),
                    precision="fp32", input_size=(320, 320))


def _frame(width: int, height: int, squares: list[tuple[int, int, int, int]]) -> RawFrame:
    """A black RGB frame with squares (x, y, side, colour 0..2)."""
    img = torch.zeros((height, width, 3), dtype=torch.uint8)
    for x, y, side, colour in squares:
        img[y:y + side, x:x + side, colour] = 255
    return RawFrame("RGB", width, height, (img,))


@pytest.fixture(scope="module")
def blobs() -> ModelStep:
    return ModelStep(BLOBS)


def test_boxes_come_back_in_each_frames_own_pixels_through_the_letterbox(blobs: ModelStep) -> None:
    frames = [_frame(640, 360, [(100, 50, 80, 0)]), _frame(200, 400, [(20, 300, 60, 2), (120, 40, 40, 1)])]
    wide, tall = blobs.infer(frames)
    assert wide.labels.tolist() == [0]
    torch.testing.assert_close(wide.boxes_xyxy, torch.tensor([[100.0, 50, 180, 130]]), atol=2.5, rtol=0)
    assert sorted(tall.labels.tolist()) == [1, 2]
    got = {c: b for c, b in zip(tall.labels.tolist(), tall.boxes_xyxy)}
    torch.testing.assert_close(got[2], torch.tensor([20.0, 300, 80, 360]), atol=2.5, rtol=0)
    torch.testing.assert_close(got[1], torch.tensor([120.0, 40, 160, 80]), atol=2.5, rtol=0)
    assert wide.scores.dtype == torch.float32 and wide.boxes_xyxy.device.type == "cpu"


def test_stretch_maps_boxes_back_per_axis() -> None:
    step = ModelStep(replace(BLOBS, transform=PreprocessOverride(resize="stretch")))
    (dets,) = step.infer([_frame(640, 160, [(320, 40, 80, 0)])])
    torch.testing.assert_close(dets.boxes_xyxy, torch.tensor([[320.0, 40, 400, 120]]), atol=3.0, rtol=0)


def test_a_frame_without_objects_gets_no_detections_and_thresholds_apply_per_call(blobs: ModelStep) -> None:
    empty, one = blobs.infer([_frame(320, 320, []), _frame(320, 320, [(10, 10, 50, 1)])])
    assert len(empty) == 0 and one.labels.tolist() == [1]
    (none,) = blobs.infer([_frame(320, 320, [(10, 10, 50, 1)])], DecodeParams(conf=0.95))  # the blob scores 0.9
    assert len(none) == 0


def test_labels_and_size_come_from_the_config_when_the_model_has_none(blobs: ModelStep) -> None:
    assert blobs.labels == ("red", "green", "blue") and blobs.input_size == (320, 320)
    assert blobs.family == "yolo-end2end"


def test_same_model_ignores_thresholds_only() -> None:
    assert BLOBS.same_model(replace(BLOBS, params=DecodeParams(conf=0.9)))
    assert not BLOBS.same_model(replace(BLOBS, model="blobs:shifted_blob_detector"))
    assert not BLOBS.same_model(replace(BLOBS, input_size=(640, 640)))


def test_a_bad_preprocess_mode_and_an_unknown_layout_fail_at_load() -> None:
    with pytest.raises(ConfigError, match=r"preprocess='bogus': expected one of \['auto'"):
        ModelStep(replace(BLOBS, preprocess="bogus"))
    with pytest.raises((ConfigError, UnsupportedModelError)):
        ModelStep(InferConfig(model="blobs:odd_layout_model", precision="fp32"))


def test_load_model_step_picks_the_object_classifier_for_secondary_and_refuses_a_detector_there() -> None:
    from classifier_models import LABELS

    from inferstream.secondary import ObjectClassifier

    step = load_model_step(InferConfig(model="classifier_models:resnet18_seeded", labels=LABELS, precision="fp32",
                                       objects=True))
    assert isinstance(step, ObjectClassifier) and step.labels == LABELS
    assert type(load_model_step(BLOBS)) is ModelStep
    with pytest.raises(ConfigError, match="secondary inference needs a classifier"):
        load_model_step(replace(BLOBS, objects=True))


def test_the_runner_and_the_model_step_import_no_gstreamer() -> None:
    code = ("import inferstream.inference, inferstream.batching, inferstream.runner.settings,"
            " inferstream.runner.stream, inferstream.runner.tracking, inferstream.frames.memory,"
            " inferstream.meta.writers, sys; print('gi' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_the_warm_up_leaves_the_first_batch_nothing_to_import(tmp_path: Path) -> None:
    """The decoder's NMS imports torchvision on its first call (seconds): the warm-up makes that call, not the
    stream's first batch. Counted as modules imported by the first real batch, in a fresh interpreter."""
    model = tmp_path / "head.py"  # a yolo head with one confident box per image: NMS has a box to keep
    model.write_text("import torch\n\nclass Head(torch.nn.Module):\n    names = {0: 'thing'}\n\n"
                     "    def forward(self, x):\n        out = torch.zeros(x.shape[0], 5, 84)\n"
                     "        out[:, :, 0] = torch.tensor([32.0, 32.0, 16.0, 16.0, 0.9])\n        return out\n\n"
                     "def make():\n    return Head()\n")
    code = ("import sys, torch; from inferstream.inference import InferConfig, load_model_step;"
            " from inferstream.rawframe import RawFrame;"
            f" step = load_model_step(InferConfig(model='{model}:make', family='yolo', input_size=(64, 64)));"
            " step.warmup(2); before = set(sys.modules);"
            " frame = RawFrame('RGB', 96, 72, (torch.zeros((72, 96, 3), dtype=torch.uint8),));"
            " dets = step.infer([frame, frame]); print(sorted(set(sys.modules) - before), [len(d) for d in dets])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] [1, 1]"


def _native_threads() -> set[int]:
    """Threads of this process as the kernel lists them: Python's and OpenMP's workers alike. Ids, not a count:
    a runtime's own thread that ends meanwhile (ONNX Runtime's, say) must not hide one that started."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc (Linux)")
@pytest.mark.parametrize("kind", ["pt", "onnx"])
def test_a_cpu_model_runs_on_its_own_thread_so_callers_start_no_openmp_pools(kind: str, person_pt: Path,
                                                                            person_onnx: Path) -> None:
    """libgomp gives every thread that starts a parallel region its own pool of workers (and with more pools than
    cores stops spinning them): infers from three threads must add those three threads and no workers of theirs.
    With ONNX Runtime torch only pre- and post-processes, on one torch thread; the process default stays."""
    threads = torch.get_num_threads()
    if threads < 2:
        pytest.skip("torch runs one thread here: no OpenMP pools to count")
    model = person_pt if kind == "pt" else person_onnx
    step = load_model_step(InferConfig(model=str(model), trust_checkpoint=True))
    own = [t for t in threading.enumerate() if t.name == f"pyinfer-model:{model.name}"]
    assert len(own) == 1 and own[0] is not threading.current_thread()
    frames = [_frame(320, 240, [(40, 40, 60, 0)])]
    (reference,) = step.infer(frames)  # from this thread: hops to the model's thread too
    before = _native_threads()
    counted, done = threading.Barrier(4), threading.Event()
    results: list[Detections] = []
    fresh: list[int] = []
    caller_ids: set[int] = set()

    def caller() -> None:
        caller_ids.add(threading.get_native_id())
        results.extend(step.infer(frames))  # the forward's parallel regions run on the model's thread
        fresh.append(torch.get_num_threads())  # a thread started after the load: the process default
        counted.wait()
        done.wait()

    callers = [threading.Thread(target=caller) for _ in range(3)]
    for t in callers:
        t.start()
    counted.wait()
    during = _native_threads()
    done.set()
    for t in callers:
        t.join()
    assert during - before == caller_ids  # without the model's thread: 3 x (torch.get_num_threads() - 1) workers more
    assert fresh == [threads] * 3 and torch.get_num_threads() == threads
    assert step._on_thread(torch.get_num_threads) == (threads if kind == "pt" else 1)
    for dets in results:
        torch.testing.assert_close(dets.boxes_xyxy, reference.boxes_xyxy, atol=0, rtol=0)
    step.close()
    own[0].join(timeout=10)
    assert not own[0].is_alive()  # closing ends the thread, and its OpenMP pool with it
