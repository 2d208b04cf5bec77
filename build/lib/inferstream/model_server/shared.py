"""The tensors a model server shares with its workers: on a GPU the CUDA tensors themselves (torch's reduction
pickles an IPC handle of each), on the CPU tensors in files both processes map (``backends.served.SharedFile``):
in memory (``/dev/shm``) when it has room, else the temp folder."""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferstream.backends.served import SharedFile

if TYPE_CHECKING:
    import torch
    from torch import Tensor


class SharedTensors:
    """Makes a worker's tensors on ``device``; ``close`` removes the files of them all."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.folders = [Path(tempfile.mkdtemp(prefix="inferstream-slots-", dir=d))
                        for d in (("/dev/shm",) if Path("/dev/shm").is_dir() else ()) + (None,)]

    def make(self, files: list[Path], shape: tuple[int, ...], dtype: torch.dtype) -> tuple[Tensor, Any]:
        """A zeroed tensor and what to send the worker for it; a CPU tensor's file is added to ``files`` (the
        worker's, removed when it goes).

        Raises:
            OSError: no folder has room for the file.
        """
        import torch

        if self.device.type == "cuda":
            tensor = torch.zeros(shape, dtype=dtype, device=self.device)
            return tensor, tensor
        size = dtype.itemsize * math.prod(shape)
        folder = next((f for f in self.folders if free_bytes(f) > 2 * size), None)
        if folder is None:  # a full tmpfs would kill both processes with SIGBUS when the pages are touched
            raise OSError(f"no room for a {size / 1e6:.0f} MB shared tensor in {' or '.join(map(str, self.folders))}")
        path = folder / f"{id(files):x}-{len(files)}"
        files.append(path)
        shared = SharedFile(str(path), shape, str(dtype).removeprefix("torch."))
        return shared.open(), shared

    def close(self) -> None:
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def free_bytes(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize
