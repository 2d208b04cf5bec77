"""TensorRT ``Dims`` without ``tuple()``: the conversion that does not abort once GStreamer is loaded.

TensorRT's ``Dims`` has ``__len__`` and ``__getitem__`` but no ``__iter__``, so ``tuple(dims)`` falls back to the
sequence protocol and ends in a C++ exception thrown through pybind11; with GStreamer / PyGObject's libraries
loaded first, that exception aborts the process (ultralytics/ultralytics#21486, NVIDIA/TensorRT#2853,
pytorch/pytorch#67960). Index it instead.

No backend of ours loads TensorRT engines today (``.engine`` files are not among the loader's formats; in
DeepStream, TensorRT runs inside nvinfer, not here): ``dims_tuple`` is the conversion every future reader of
TensorRT shapes must use, and ``patch_ultralytics_tensorrt`` is for a ``package.module:factory`` model of yours
that runs an ultralytics ``.engine`` inside a GStreamer process (ultralytics' TensorRT backend calls ``tuple()``
on engine shapes): call it in your factory after importing ultralytics.

No module here imports TensorRT: the helpers take whatever object TensorRT hands back.
"""
from __future__ import annotations

import builtins
import importlib
from typing import Any, Protocol


class SizedIndexable(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Any: ...


def dims_tuple(dims: SizedIndexable | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """``dims`` as a tuple of ints, by index (never through iteration).

    Raises:
        TypeError: an entry that is not an integer.
    """
    out = []
    for i in range(len(dims)):
        value = dims[i]
        if not isinstance(value, int) and not hasattr(value, "__index__"):
            raise TypeError(f"dimension {i}: expected an integer, got {type(value).__name__}")
        out.append(int(value))
    return tuple(out)


def safe_tuple(value: Any = (), /) -> tuple[Any, ...]:
    """``tuple`` for a module that may hand it TensorRT ``Dims``: those go by index, anything else as usual."""
    kind = type(value)
    if getattr(kind, "__iter__", None) is None and hasattr(kind, "__len__") and hasattr(kind, "__getitem__"):
        return tuple(value[i] for i in range(len(value)))
    return builtins.tuple(value)


def patch_ultralytics_tensorrt() -> bool:
    """Make ``tuple`` inside ultralytics' TensorRT backend module ``safe_tuple``; call it only once ultralytics is
    imported anyway (the module imports TensorRT itself only when it loads an engine).

    Returns:
        True when the module exists (ultralytics >= 8.4) and is patched.
    """
    try:
        module = importlib.import_module("ultralytics.nn.backends.tensorrt")
    except ImportError:
        return False
    module.tuple = safe_tuple  # type: ignore[attr-defined]  # the module's global, shadowing the builtin
    return True
