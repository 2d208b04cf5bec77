"""runner.swap.ModelSwap: hot swap without GStreamer. Real ModelSteps (tests/blobs.py: the shifted model reports
classes 3..5, so which model inferred a frame is visible) and a real BatchGroup; the events are kept in a list."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import torch

from inferstream.batching import BatchGroup
from inferstream.inference import InferConfig, ModelStep
from inferstream.rawframe import RawFrame
from inferstream.runner.swap import ModelSwap

CFG = InferConfig(model="blobs:color_blob_detector", family="yolo-end2end", precision="fp32",
                  labels=tuple(f"c{i}" for i in range(6)))
SHIFTED = "blobs:shifted_blob_detector"


class _Events:
    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.done = threading.Event()

    def warn(self, exc: BaseException, text: str) -> None:
        self.log.append(("warn", f"{text}: {exc}"))
        self.done.set()

    def swapped(self, old_model: str, new_model: str) -> None:
        self.log.append(("swapped", f"{old_model} -> {new_model}"))
        self.done.set()

    def show_running(self, model: str) -> None:
        self.log.append(("show", model))


def _load(model: str) -> ModelStep:
    return ModelStep(replace(CFG, model=model))


def _red_square() -> RawFrame:
    img = torch.zeros((64, 64, 3), dtype=torch.uint8)
    img[10:40, 10:40, 0] = 255
    return RawFrame("RGB", 64, 64, (img,))


@pytest.fixture
def group() -> BatchGroup:
    g = BatchGroup("swap", CFG, ModelStep(CFG), batch_size=1, max_latency_s=1.0)
    g.join()
    return g


def _attached(load: Callable[[str], ModelStep], group: BatchGroup) -> tuple[ModelSwap, _Events]:
    events = _Events()
    swap = ModelSwap(load, events)
    swap.attach(group)
    return swap, events


def test_a_requested_model_is_swapped_in_between_batches(group: BatchGroup) -> None:
    swap, events = _attached(_load, group)
    swap.request(SHIFTED)
    assert events.done.wait(30)
    assert events.log == [("swapped", f"{CFG.model} -> {SHIFTED}")]
    assert group.cfg.model == SHIFTED
    (dets,) = group.model.infer([_red_square()])
    assert dets.labels.tolist() == [3]  # the shifted model's red


def test_a_model_that_fails_to_load_leaves_the_running_one(group: BatchGroup) -> None:
    swap, events = _attached(_load, group)
    swap.request("blobs:no_such_factory")
    assert events.done.wait(30)
    (kind, text), shown = events.log
    assert kind == "warn" and "model swap to 'blobs:no_such_factory' failed, still running" in text
    assert shown == ("show", CFG.model) and group.cfg.model == CFG.model


def test_a_load_finishing_after_stop_or_a_newer_request_is_cancelled(group: BatchGroup) -> None:
    release = threading.Event()

    def slow_load(model: str) -> ModelStep:
        release.wait(30)
        return _load(model)

    swap, events = _attached(slow_load, group)
    swap.request(SHIFTED)
    swap.detach()  # the element stops while the model loads
    release.set()
    assert events.done.wait(30)
    assert events.log[0][0] == "warn" and f"model swap to {SHIFTED!r} cancelled" in events.log[0][1]
    assert group.cfg.model == CFG.model


def test_only_the_newest_of_two_requests_is_swapped_in(group: BatchGroup) -> None:
    first_may_finish = threading.Event()

    def load(model: str) -> ModelStep:
        if model == SHIFTED:
            first_may_finish.wait(30)
        return _load(model)

    swap, events = _attached(load, group)
    swap.request(SHIFTED)
    swap.request(CFG.model)  # the newer request: loads at once
    deadline = time.monotonic() + 30
    while not any(k == "swapped" for k, _ in events.log) and time.monotonic() < deadline:
        time.sleep(0.01)
    events.done.clear()
    first_may_finish.set()
    assert events.done.wait(30)
    assert events.log == [("swapped", f"{CFG.model} -> {CFG.model}"),
                          ("warn", f"model swap to {SHIFTED!r} cancelled: superseded by model {CFG.model!r}")]
