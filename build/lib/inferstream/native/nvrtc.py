"""CUDA C kernels compiled at run time with NVRTC and launched through the driver API, both through ctypes.

For the few kernels where a chain of torch ops costs many full-resolution passes (``letterbox_kernel``). NVRTC ships
with every CUDA build of torch (its pip wheels depend on it, a CUDA toolkit has it too), so this adds no
dependency and needs no compiler on the machine: the source is compiled once per device, for that device's
architecture, on first use.

Launches go through ``ctypes.PyDLL``: ``cuLaunchKernel`` only queues work and returns, so it keeps the GIL (no
hand-off to another thread between two kernels of one batch; see ``native.gst``).
"""
from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

from inferstream.native.cuda import check_cu, libcuda
from inferstream.native.gst import bind

_NVRTC_SUCCESS = 0


class KernelUnavailable(RuntimeError):
    """NVRTC or the driver is missing, or the source does not compile: the caller falls back to torch ops."""


@functools.cache
def _nvrtc() -> ctypes.CDLL:
    """libnvrtc matching torch's CUDA: from the loader path, else from the ``nvidia`` pip packages torch uses."""
    import torch

    if not torch.version.cuda:
        raise KernelUnavailable("torch is a CPU-only build")
    major = torch.version.cuda.split(".")[0]
    candidates = [f"libnvrtc.so.{major}", "libnvrtc.so"]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(glob.glob(os.path.join(root, "*", "lib", f"libnvrtc.so.{major}*")))
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        _bind_nvrtc(lib)
        return lib
    raise KernelUnavailable(f"libnvrtc for CUDA {major} not found (tried {', '.join(candidates)})")


def _bind_nvrtc(lib: ctypes.CDLL) -> None:
    vp, i, cp, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t
    bind(lib, [("nvrtcCreateProgram", i, (ctypes.POINTER(vp), cp, cp, i, vp, vp)),
               ("nvrtcCompileProgram", i, (vp, i, ctypes.POINTER(cp))),
               ("nvrtcGetProgramLogSize", i, (vp, ctypes.POINTER(sz))), ("nvrtcGetProgramLog", i, (vp, cp)),
               ("nvrtcGetCUBINSize", i, (vp, ctypes.POINTER(sz))), ("nvrtcGetCUBIN", i, (vp, cp)),
               ("nvrtcDestroyProgram", i, (ctypes.POINTER(vp),)), ("nvrtcGetErrorString", cp, (i,))])


def compile_cubin(source: str, arch: tuple[int, int], name: str = "kernels.cu") -> bytes:
    """Compile CUDA C ``source`` to a cubin for compute capability ``arch`` (no GPU needed).

    Raises:
        KernelUnavailable: no NVRTC, or a compile error (the message carries NVRTC's log).
    """
    nv = _nvrtc()
    prog = ctypes.c_void_p()

    def check(result: int, call: str) -> None:
        if result != _NVRTC_SUCCESS:
            raise KernelUnavailable(f"{call}: {nv.nvrtcGetErrorString(result).decode()}")

    check(nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
          "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture=sm_{arch[0]}{arch[1]}".encode(), b"--std=c++17"]
        result = nv.nvrtcCompileProgram(prog, len(options), (ctypes.c_char_p * len(options))(*options))
        if result != _NVRTC_SUCCESS:
            size = ctypes.c_size_t()
            nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nv.nvrtcGetProgramLog(prog, log)
            raise KernelUnavailable(f"NVRTC could not compile {name} for sm_{arch[0]}{arch[1]}: "
                                    f"{log.value.decode(errors='replace').strip()}")
        size = ctypes.c_size_t()
        check(nv.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        check(nv.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin.raw
    finally:
        nv.nvrtcDestroyProgram(ctypes.byref(prog))


class Kernel:
    """One ``__global__`` function of a loaded module."""

    __slots__ = ("_function", "name")

    def __init__(self, function: int, name: str) -> None:
        self._function, self.name = function, name

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[Any],
               stream: int) -> None:
        """Queue the kernel on ``CUstream`` ``stream`` (of the current context) with ctypes values ``args``,
        passed by value in order (structures included)."""
        params = (ctypes.c_void_p * len(args))(*map(ctypes.addressof, args))
        check_cu(libcuda().cuLaunchKernel(self._function, *grid, *block, 0, stream, params, None),
                 f"cuLaunchKernel({self.name})")


_MODULES: dict[tuple[str, int], dict[str, Kernel]] = {}
_LOCK = threading.Lock()


def load_kernels(source: str, names: Sequence[str], device_index: int) -> dict[str, Kernel]:
    """The ``extern "C"`` kernels ``names`` of ``source``, compiled for and loaded on CUDA device
    ``device_index`` once per process (in torch's primary context, which must be current on this thread: any
    torch op on that device makes it so).

    Raises:
        KernelUnavailable: as ``compile_cubin``, or the driver cannot load the module.
    """
    key = (source, device_index)
    kernels = _MODULES.get(key)
    if kernels is not None:
        return kernels
    import torch

    with _LOCK:
        if key in _MODULES:
            return _MODULES[key]
        cubin = compile_cubin(source, torch.cuda.get_device_capability(device_index))
        try:
            cu = libcuda()
        except OSError as exc:
            raise KernelUnavailable(f"no CUDA driver: {exc}") from exc
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        try:
            check_cu(cu.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
            kernels = {}
            for name in names:
                check_cu(cu.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()),
                         f"cuModuleGetFunction({name})")
                kernels[name] = Kernel(fn.value or 0, name)
        except RuntimeError as exc:
            raise KernelUnavailable(str(exc)) from exc
        _MODULES[key] = kernels
        return kernels
