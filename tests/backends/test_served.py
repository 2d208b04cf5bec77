"""The model server (``inferstream.model_server``) and its client backend (``model=ipc://...``), run for real: a
server process holding a real YOLO detector, clients in this process. The reference is the same model loaded
here: a served batch gives its outputs, two workers' requests run as one forward with each worker getting its
own frames' outputs back, and a missing, dying or broken server is a clear error, never a hang. On the GPU
machine the same tests run on CUDA (the tensors then cross by CUDA IPC)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from inferstream.backends.base import Backend
from inferstream.backends.loader import load_backend
from inferstream.backends.served import ServedBackend
from inferstream.errors import BackendInitError, InferenceServerError
from inferstream.rawframe import RawFrame

CARRIED = Path(__file__).resolve().parents[2] / ".gpu-carry" / "models" / "yolo11s-random.torchscript"
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"))]
SIZE = 320  # the person detector takes any multiple of 32: small keeps a CPU forward short


@pytest.fixture
def detector(request: pytest.FixtureRequest, device: str) -> tuple[str, tuple[str, ...], int]:
    """The model, its loading options and its input size: the real person detector; on CUDA the carried YOLO11s
    when present (the GPU machine's own model, traced at 640: its anchor grid is fixed)."""
    if device == "cuda" and CARRIED.is_file():
        return str(CARRIED), (), 640
    return str(request.getfixturevalue("person_pt")), ("--trust-checkpoint",), SIZE


@contextlib.contextmanager
def serving(tmp_path: Path, model: str, device: str, *extra: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A model server on ``tmp_path/model.sock``, ready; stopped at the end."""
    socket = tmp_path / "model.sock"
    proc = subprocess.Popen([sys.executable, "-m", "inferstream.model_server", "--listen", str(socket), "--model",
                             model, "--device", device, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert '"ready"' in ready, proc.communicate(timeout=30)[1]
        yield f"ipc://{socket}", proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def _stop(proc: subprocess.Popen[str]) -> dict[str, int]:
    """Stop the server the way the app does (SIGTERM); its counts line, without the time it spent in forwards
    (checked to be some, the device's share of it no more than all of it) and its requests' (one or more a forward,
    each there for its whole forward at least)."""
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    counts: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    busy, device, queued = counts.pop("busy_s"), counts.pop("device_s"), counts.pop("queued")
    requests, request_s = counts.pop("requests"), counts.pop("request_s")
    decodes, decode_s = counts.pop("decodes"), counts.pop("decode_s")
    assert 0 <= decodes <= counts["forwards"] and decode_s >= 0 and (decode_s > 0) == (decodes > 0), counts
    assert (busy > 0 and 0 < device <= busy) or not counts["forwards"], (busy, device, counts)
    assert 0 <= queued < max(1, counts["forwards"]), (queued, counts)  # the first forward queues behind none
    assert requests >= counts["forwards"] and request_s >= busy, (requests, request_s, busy, counts)
    return counts


def _frames(n: int, seed: int, device: str, size: int = SIZE) -> torch.Tensor:
    """``n`` distinct letterboxed-looking frames: smooth blobs on grey padding, seeded."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand((n, 3, size // 16, size // 16), generator=g)
    x = torch.nn.functional.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)
    x[:, :, : size // 8] = 114 / 255
    return x.to(device)


def _local(model: str, device: str, trust: bool) -> Backend:
    return load_backend(model, device=device, trust_checkpoint=trust)


def _assert_same(served: list[torch.Tensor], local: list[torch.Tensor]) -> None:
    assert [tuple(s.shape) for s in served] == [tuple(t.shape) for t in local]
    for s, t in zip(served, local):
        torch.testing.assert_close(s.float(), t.float(), atol=2e-2, rtol=1e-2)


def _ask_at_once(workers: list[Backend], frames: list[torch.Tensor], timeout: float) -> dict[int, list[torch.Tensor]]:
    """Each worker's batch sent from a thread of its own, all at once: the outputs, copied, by worker."""
    outputs: dict[int, list[torch.Tensor]] = {}

    def ask(k: int) -> None:
        outputs[k] = [o.clone() for o in workers[k](frames[k])]

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return outputs


@pytest.mark.parametrize("device", DEVICES)
def test_a_served_batch_gives_the_outputs_of_the_model_loaded_here(
        tmp_path: Path, device: str, detector: tuple[str, tuple[str, ...], int]) -> None:
    model, options, size = detector
    local = _local(model, device, bool(options))
    with serving(tmp_path, model, device, *options) as (spec, proc):
        served = load_backend(spec, device=device)
        assert served.device.type == device and served.dtype == local.dtype and served.info == local.info
        served.warmup(2, (size, size))
        for n, seed in ((2, 1), (1, 2), (3, 3)):  # 3 > the registered 2: it registers again, larger
            frames = _frames(n, seed, device, size).to(local.dtype)
            out = served(frames)
            assert all(o.device.type == device for o in out)
            _assert_same(out, local(frames))
        served.close()
        assert _stop(proc) == {"forwards": 3, "frames": 6, "workers": 1}


@pytest.mark.parametrize("device", DEVICES)
def test_two_workers_requests_run_as_one_forward_each_getting_its_own_frames(
        tmp_path: Path, device: str, detector: tuple[str, tuple[str, ...], int]) -> None:
    model, options, size = detector
    local = _local(model, device, bool(options))
    with serving(tmp_path, model, device, *options, "--delay-ms", "20000") as (spec, proc):
        workers = [load_backend(spec, device=device) for _ in range(2)]
        for w in workers:
            w.warmup(2, (size, size))
        frames = [_frames(2, 10 + k, device, size).to(local.dtype) for k in range(2)]
        started = time.monotonic()
        outputs = _ask_at_once(workers, frames, 60)
        assert time.monotonic() - started < 20, "the server waited out its delay: it did not see both requests"
        for k in range(2):
            _assert_same(outputs[k], local(frames[k]))  # each worker's own frames, not the other's
        assert not torch.equal(outputs[0][0], outputs[1][0])
        for w in workers:
            w.close()
        assert _stop(proc) == {"forwards": 1, "frames": 4, "workers": 2}


@pytest.mark.parametrize("device", DEVICES)
def test_batches_sent_before_the_last_one_is_collected_each_get_their_own_outputs(
        tmp_path: Path, device: str, detector: tuple[str, tuple[str, ...], int]) -> None:
    """A batch group sends its next batches while the server still runs the last one (three lanes, in turn): each
    batch gets its own outputs, which stay untouched while the next batches run, and a fourth batch sent before the
    first is collected is refused, not run over the first one's tensors."""
    model, options, size = detector
    local = _local(model, device, bool(options))
    with serving(tmp_path, model, device, *options) as (spec, proc):
        served = load_backend(spec, device=device)
        assert isinstance(served, ServedBackend)
        served.warmup(2, (size, size))
        frames = [_frames(2, 20 + k, device, size).to(local.dtype) for k in range(5)]
        sent = [served.submit(frames[k]) for k in range(3)]
        with pytest.raises(InferenceServerError, match="more than 3 batches sent"):
            served.submit(frames[3])
        _assert_same(sent[0](), local(frames[0]))
        sent.append(served.submit(frames[3]))  # on the first one's lane, the others still running or waiting
        outs = [sent[k]() for k in (1, 2)]
        fourth = sent[3]()
        for k, out in ((1, outs[0]), (2, outs[1])):  # the fourth batch ran meanwhile and did not touch them
            _assert_same(out, local(frames[k]))
        fifth = served.submit(frames[4])()
        _assert_same(fourth, local(frames[3]))
        _assert_same(fifth, local(frames[4]))
        served.close()
        counts = _stop(proc)  # requests waiting together run as one forward: fewer forwards than batches
        assert counts["frames"] == 10 and 2 <= counts["forwards"] <= 5, counts
        assert counts["workers"] == 1, counts  # three lanes, one client


SLOW_MODEL = """
import time

import torch
from torch import nn


class SlowMeans(nn.Module):
    \"\"\"Each frame's channel means, after sleeping {forward_s} s on a batch of more than one frame (on a GPU
    the device sleeps, about that long at 2 GHz).\"\"\"

    def forward(self, x):
        if x.shape[0] > 1:
            if x.is_cuda:
                torch.cuda._sleep(int({forward_s} * 2e9))
            else:
                time.sleep({forward_s})
        return x.mean(dim=(2, 3))


def make():
    return SlowMeans()
"""


@pytest.mark.parametrize("device", DEVICES)
def test_a_full_forward_is_launched_behind_the_running_one_and_each_worker_gets_its_own_rows(
        tmp_path: Path, device: str) -> None:
    """Three workers ask for 2 frames each at once, with forwards of at most 2: the first runs, the second is
    launched behind it while it runs (the device never waits for the server's host work between them), the third
    behind the second once the first has ended; each worker gets its own frames' outputs."""
    forward_s = 0.6
    model = tmp_path / "slow.py"
    model.write_text(SLOW_MODEL.format(forward_s=forward_s))
    with serving(tmp_path, f"{model}:make", device, "--max-batch", "2") as (spec, proc):
        workers = [load_backend(spec, device=device) for _ in range(3)]
        for w in workers:
            w.warmup(2, (32, 32))
        frames = [_frames(2, 30 + k, device, 32) for k in range(3)]
        outputs = _ask_at_once(workers, frames, 60)
        for k in range(3):  # fp16 on a GPU
            torch.testing.assert_close(outputs[k][0].float(), frames[k].mean(dim=(2, 3)), atol=2e-3, rtol=1e-3)
        for w in workers:
            w.close()
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    counts = json.loads(out.strip().splitlines()[-1])
    assert (counts["forwards"], counts["frames"], counts["queued"]) == (3, 6, 2), (counts, err)
    # busy: three forwards one after the other, a queued one counted from the end of the one before (from its launch
    # the two queued ones would add about 2 x forward_s more); on a GPU the device's own clock times the sleeps
    if device == "cpu":
        assert 3 * forward_s <= counts["busy_s"] < 4 * forward_s, counts
    else:
        assert 3 * forward_s / 2 < counts["device_s"] <= counts["busy_s"] < counts["device_s"] + forward_s, counts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CUDA graphs)")
def test_on_a_gpu_three_requests_of_8_run_their_own_graph_of_24(tmp_path: Path) -> None:
    """With ``--capture every-sum`` every sum of whole requests gets a CUDA graph of its own: three workers'
    batches of 8 run as one forward of 24 frames on it, and each worker gets its own frames' outputs."""
    if not CARRIED.is_file():
        pytest.skip("needs the GPU machine's carried model (bench/gpu/make_model.py)")
    model, size = str(CARRIED), 640
    local = _local(model, "cuda", False)
    with serving(tmp_path, model, "cuda", "--delay-ms", "20000", "--capture", "every-sum") as (spec, proc):
        workers = [load_backend(spec, device="cuda") for _ in range(3)]
        for w in workers:
            w.warmup(8, (size, size))
        frames = [_frames(8, 20 + k, "cuda", size).to(local.dtype) for k in range(3)]
        outputs = _ask_at_once(workers, frames, 120)
        for k in range(3):
            _assert_same(outputs[k], local(frames[k]))
        for w in workers:
            w.close()
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    notes = [json.loads(line)["note"] for line in out.splitlines() if '"note"' in line]
    assert len(notes) == 1 and notes[0].startswith("warmed up for batches of 8, 16, 24, 32 at 640x640 in "), notes
    assert " 24x640x640 " in notes[0], notes  # the graphs captured, with their replay times
    counts = json.loads(out.strip().splitlines()[-1])
    assert (counts["forwards"], counts["frames"]) == (1, 24), err


def test_no_server_at_the_socket_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BackendInitError, match="no model server at .*nothing.sock"):
        load_backend(f"ipc://{tmp_path}/nothing.sock")
    with pytest.raises(BackendInitError, match="ipc:///absolute"):
        load_backend("ipc://relative.sock")


def test_a_server_that_dies_is_an_error_naming_it_not_a_hang(tmp_path: Path, person_pt: Path) -> None:
    with serving(tmp_path, str(person_pt), "cpu", "--trust-checkpoint") as (spec, proc):
        served = load_backend(spec)
        served.warmup(1, (SIZE, SIZE))
        proc.kill()
        proc.wait()
        started = time.monotonic()
        with pytest.raises(InferenceServerError, match="closed the connection: it stopped or died"):
            served(_frames(1, 0, "cpu"))
        assert time.monotonic() - started < 5


def test_a_worker_arriving_while_another_registers_waits_its_turn_not_fails(tmp_path: Path, person_pt: Path) -> None:
    """The server answers in turn: a hello and a run queued behind a registration (which warms the model up, on a GPU
    capturing graphs for longer than a forward) get their answers once it is done."""
    local = _local(str(person_pt), "cpu", True)
    with serving(tmp_path, str(person_pt), "cpu", "--trust-checkpoint", "--max-batch", "32") as (spec, proc):
        first = load_backend(spec)
        registered: list[float] = []
        warming = threading.Thread(target=lambda: (first.warmup(4, (SIZE, SIZE)),
                                                   registered.append(time.monotonic())))
        warming.start()
        time.sleep(0.2)  # the registration is in the server's hands: it warms the model up for a batch of 32
        second = load_backend(spec)
        frames = _frames(1, 4, "cpu")
        out = second(frames)
        answered = time.monotonic()
        warming.join(120)
        assert registered and registered[0] <= answered, "the second worker was answered before the registration"
        _assert_same(out, local(frames))
        first.close()
        second.close()
        assert _stop(proc) == {"forwards": 1, "frames": 1, "workers": 2}


def test_a_server_started_again_at_the_socket_gets_the_lost_batch(tmp_path: Path, person_pt: Path) -> None:
    local = _local(str(person_pt), "cpu", True)
    frames = _frames(2, 7, "cpu")
    with serving(tmp_path, str(person_pt), "cpu", "--trust-checkpoint") as (spec, proc):
        served = load_backend(f"{spec}?reconnect=60")
        served.warmup(2, (SIZE, SIZE))
        proc.kill()
        proc.wait()
        with serving(tmp_path, str(person_pt), "cpu", "--trust-checkpoint") as (_, again):
            _assert_same(served(frames), local(frames))  # registered again, and the batch ran on the new server
            served.close()
            assert _stop(again) == {"forwards": 1, "frames": 2, "workers": 1}


@pytest.mark.parametrize(("suffix", "why"), [("?reconnect=x", "reconnect is seconds"),
                                             ("?retries=3", "unknown option"), ("?reconnect=-1", "0 to 3600")])
def test_bad_socket_options_are_refused(tmp_path: Path, suffix: str, why: str) -> None:
    with pytest.raises(BackendInitError, match=why):
        load_backend(f"ipc://{tmp_path}/m.sock{suffix}")


def test_a_model_the_server_cannot_load_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not an onnx model")
    run = subprocess.run([sys.executable, "-m", "inferstream.model_server", "--listen", str(tmp_path / "m.sock"),
                          "--model", str(bad)], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"model server: cannot load {bad}:") and len(run.stderr.splitlines()) == 1


def test_a_client_on_another_device_than_the_server_is_refused(tmp_path: Path, person_pt: Path) -> None:
    with serving(tmp_path, str(person_pt), "cpu", "--trust-checkpoint") as (spec, _), \
            pytest.raises(BackendInitError, match="runs the model on cpu, not on cuda"):
        ServedBackend(spec, torch.device("cuda"))


def test_no_room_for_the_shared_tensors_is_that_workers_error_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full /dev/shm would kill both processes with SIGBUS once the pages of a mapped file are touched: the server
    refuses the registration instead, and the worker hears why."""
    from multiprocessing import Pipe

    from inferstream import model_server
    from inferstream.model_server import forwards, shared

    server = model_server.ModelServer(load_backend("blobs:color_blob_detector"))
    here, there = Pipe()
    client = forwards.Client(there)
    monkeypatch.setattr(shared, "free_bytes", lambda _folder: 1000)
    server._handle(client, ("register", 2, 64, 64))
    kind, why = here.recv()
    assert kind == "error" and why.startswith("OSError: no room for a ") and "inferstream-slots-" in why
    monkeypatch.undo()
    server._handle(client, ("register", 2, 64, 64))
    kind, shared_in, shared_out = here.recv()
    assert kind == "slots" and shared_in.shape == (2, 3, 64, 64) and len(shared_out) == 1
    server.close()
    assert not any(folder.exists() for folder in server._shared.folders)


class _Job:
    """A batch's frame (``batching.FrameJob``): a red square at ``x``; where it was delivered, and in which order."""

    def __init__(self, x: int, log: list[tuple[int, int]], stream: int, index: int) -> None:
        img = torch.zeros((120, 200, 3), dtype=torch.uint8)
        img[30:70, x:x + 40, 0] = 255
        self._frame, self.buf, self.x = RawFrame("RGB", 200, 120, (img,)), object(), x
        self._log, self._key = log, (stream, index)
        self.dets: Any = None
        self.delivered_on = ""

    def frame(self) -> contextlib.AbstractContextManager[RawFrame]:
        return contextlib.nullcontext(self._frame)

    def deliver(self, dets: Any, model: Any) -> None:
        self.dets, self.delivered_on = dets, threading.current_thread().name
        self._log.append(self._key)


def test_a_batch_group_on_a_served_model_leads_a_batch_and_goes_on_while_it_runs(tmp_path: Path) -> None:
    """The thread that fills a batch of a served model only hands it over (its stream can bring its next frame
    while the server runs the batch); the group's completion thread collects and delivers the batches in the order
    they were taken, each frame getting its own detections, with up to three batches at the server at once."""
    from inferstream.batching import BatchGroup
    from inferstream.inference import InferConfig, ModelStep

    streams, rounds = 4, 12
    with serving(tmp_path, "blobs:color_blob_detector", "cpu") as (spec, proc):
        cfg = InferConfig(model=spec, family="yolo-end2end", labels=("red", "green", "blue"))
        group = BatchGroup("served", cfg, ModelStep(cfg), batch_size=streams, max_latency_s=5.0)
        members = [group.join() for _ in range(streams)]
        for member in members:
            member.in_flight = 2
        log: list[tuple[int, int]] = []
        jobs = [[_Job(10 + 37 * s + k % 3, log, s, k) for k in range(rounds)] for s in range(streams)]
        led_and_went_on: list[bool] = []

        def stream(s: int) -> None:  # in-flight 2: a frame waits for the one before it only once it is handed over
            held = []
            for job in jobs[s]:
                held.append(group.submit(job, cfg.params, members[s]))
                led_and_went_on.append(held[-1].taken and not held[-1].done)
                if len(held) == 2:
                    group.wait(held.pop(0))
            group.wait(held.pop())

        threads = [threading.Thread(target=stream, args=(s,), name=f"stream{s}") for s in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        group._drain()
        group.model.close()
        counts = _stop(proc)
    assert not any(t.is_alive() for t in threads)
    for s in range(streams):
        assert [k for t, k in log if t == s] == list(range(rounds)), f"stream {s}: frames delivered out of order"
        for job in jobs[s]:
            assert job.delivered_on.startswith("inferstream-complete-"), job.delivered_on
            assert job.dets is not None and job.dets.labels.tolist() == [0]
            torch.testing.assert_close(job.dets.boxes_xyxy[0], torch.tensor([job.x, 30.0, job.x + 40.0, 70]),
                                       atol=1.5, rtol=0)  # its own frame's square, no other stream's
    assert any(led_and_went_on), "no thread that filled a batch came back before the batch was done"
    assert group.stats.batches == rounds and group.stats.frames == streams * rounds
    assert counts["frames"] >= streams * rounds and counts["workers"] == 1, counts
