"""``mps: auto|on|off``: when a run starts its own CUDA MPS daemon for its workers (the daemon itself runs on the
GPU machine: ``bench/gpu/app_workers.py --mps off,on`` starts it through the app and records what it said)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from inferstream.app import mps
from inferstream.app.mps import mps_plan

CONTROL = "/usr/bin/nvidia-cuda-mps-control"


@pytest.fixture(autouse=True)
def no_machine_daemon(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The default pipe folder of this machine must not decide the cases below."""
    monkeypatch.setattr(mps, "DEFAULT_PIPE", tmp_path / "nvidia-mps")


@pytest.mark.parametrize(("setting", "workers", "device"), [
    ("auto", 4, "cuda"), ("auto", 2, "cuda:1"), ("on", 8, "cuda"),
])
def test_two_or_more_workers_on_cuda_start_a_private_daemon(setting: mps.MpsSetting, workers: int,
                                                           device: str) -> None:
    assert mps_plan(setting, workers, device, control=CONTROL, environ={}) == ("start", None)


@pytest.mark.parametrize(("setting", "workers", "device"), [
    ("off", 8, "cuda"),  # asked not to
    ("auto", 1, "cuda"), ("on", 1, "cuda"),  # one process: nothing to share
    ("auto", 8, "cpu"), ("on", 8, "cpu"),  # no GPU in the run
])
def test_no_daemon_when_off_for_one_worker_or_on_cpu(setting: mps.MpsSetting, workers: int, device: str) -> None:
    assert mps_plan(setting, workers, device, control=CONTROL, environ={}) == ("none", None)


def test_a_running_daemon_is_used_as_it_is(tmp_path: Path) -> None:
    action, note = mps_plan("auto", 4, "cuda", control=CONTROL, environ={"CUDA_MPS_PIPE_DIRECTORY": "/run/mps"})
    assert action == "running" and note is not None and "already running" in note
    (mps.DEFAULT_PIPE).mkdir()
    (mps.DEFAULT_PIPE / "control").touch()
    assert mps_plan("on", 4, "cuda", control=CONTROL, environ={})[0] == "running"


def test_a_missing_control_program_is_said_when_asked_for_and_quiet_on_auto() -> None:
    assert mps_plan("auto", 4, "cuda", control="", environ={}) == ("none", None)
    action, note = mps_plan("on", 4, "cuda", control="", environ={})
    assert action == "none" and note is not None and "nvidia-cuda-mps-control is not on PATH" in note


def test_the_daemon_block_without_a_daemon_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    said: list[str] = []
    with mps.cuda_mps("on", 4, "cpu", said.append):
        assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert said == []
