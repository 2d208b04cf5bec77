"""CUDA MPS for the worker processes of one run (``mps: auto|on|off``, ``--mps``).

Without MPS the GPU time-slices between the workers' CUDA contexts: one process's kernels at a time, so past a few
workers the GPU is busy switching while the model runs at a fraction of its rate. Under the MPS daemon the
workers' kernels share the GPU at once (``BENCHMARKS.md``, *The app with worker processes on the H200*). The
run starts a private control daemon (its own pipe and log folders, so it neither meets nor disturbs a daemon of
the machine's), hands its pipe folder to the workers through the environment, and quits it when the run ends.

A daemon that is already running (``CUDA_MPS_PIPE_DIRECTORY`` set, or the default pipe folder present) is used
as it is. The cost users should know: under MPS a fatal GPU fault in one worker reaches the other workers of
the same daemon (NVIDIA's MPS documentation, "Error containment"), so the supervisor's restart then sees several
workers fail at once.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Literal

MpsSetting = Literal["auto", "on", "off"]
CONTROL: Final = "nvidia-cuda-mps-control"
DEFAULT_PIPE: Final = Path("/tmp/nvidia-mps")  # where clients look when CUDA_MPS_PIPE_DIRECTORY is unset
_START_TIMEOUT_S: Final = 20.0


def mps_plan(setting: MpsSetting, workers: int, device: str, *, control: str | None = None,
             environ: dict[str, str] | None = None) -> tuple[str, str | None]:
    """What to do for this run: ``("start" | "running" | "none", note)``.

    ``auto`` starts a daemon when there is more than one worker on a CUDA device and the control program is
    installed; ``on`` insists (a missing program is said, not hidden); ``off`` and CPU runs do nothing.
    ``control`` / ``environ``: the control program's path and the environment (default: looked up).
    """
    env = os.environ if environ is None else environ
    if setting == "off" or workers < 2 or not device.startswith("cuda"):
        return "none", None
    if env.get("CUDA_MPS_PIPE_DIRECTORY") or (DEFAULT_PIPE / "control").exists():
        return "running", "mps: the workers use the MPS daemon already running on this machine"
    program = control if control is not None else shutil.which(CONTROL)
    if not program:
        note = (f"mps: {CONTROL} is not on PATH: the {workers} workers time-slice the GPU (install the NVIDIA "
                "driver's utilities, or set mps: off to silence this)") if setting == "on" else None
        return "none", note
    return "start", None


@contextlib.contextmanager
def cuda_mps(setting: MpsSetting, workers: int, device: str, say: Callable[[str], None]) -> Iterator[None]:
    """Run the block with an MPS daemon for its worker processes (see :func:`mps_plan`), or without one.

    A daemon that fails to start is said in one line and the run goes on without it. The environment variables
    it sets are inherited by processes started inside the block and removed afterwards.
    """
    action, note = mps_plan(setting, workers, device)
    if note:
        say(note)
    if action != "start":
        yield
        return
    root = Path(tempfile.mkdtemp(prefix="inferstream-mps-"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "log")}
    error = _start(env)
    if error:
        say(f"mps: could not start the MPS daemon ({error}): the {workers} workers time-slice the GPU")
        shutil.rmtree(root, ignore_errors=True)
        yield
        return
    say(f"mps: started a private MPS daemon for the {workers} workers")
    os.environ.update(env)
    try:
        yield
    finally:
        for key in env:
            os.environ.pop(key, None)
        _quit(env)
        shutil.rmtree(root, ignore_errors=True)


def _start(env: dict[str, str]) -> str | None:
    for folder in env.values():
        Path(folder).mkdir(parents=True)
    try:
        done = subprocess.run([CONTROL, "-d"], env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=_START_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{type(e).__name__}: {e}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit code {done.returncode}"
    return None


def _quit(env: dict[str, str]) -> None:
    """``quit`` waits for the daemon's clients to end; the workers have ended when the run returns."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([CONTROL], input="quit\n", env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=_START_TIMEOUT_S, check=False)
