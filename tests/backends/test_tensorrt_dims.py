"""backends.tensorrt_dims: TensorRT ``Dims`` read by index, never iterated (the tuple() abort under GStreamer)."""
from __future__ import annotations

import builtins

import pytest

from inferstream.backends.tensorrt_dims import dims_tuple, patch_ultralytics_tensorrt, safe_tuple


class NoIterDims:
    """The real binding's shape: ``__len__`` and ``__getitem__``, no ``__iter__``, so ``tuple()`` walks
    ``__getitem__`` off the end, into the C++ exception (where GStreamer is loaded, an abort)."""

    def __init__(self, *values: int) -> None:
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < len(self._values):
            raise RuntimeError("std::out_of_range")  # not IndexError: the sequence protocol never stops
        return self._values[i]


class RaisingIterDims(NoIterDims):
    """The same, where iterating fails outright: proves the conversion never iterates."""

    def __iter__(self) -> None:
        raise AssertionError("Dims must not be iterated")


def test_dims_tuple_indexes_instead_of_iterating() -> None:
    assert dims_tuple(RaisingIterDims(1, 3, 640, 640)) == (1, 3, 640, 640)
    assert dims_tuple(RaisingIterDims()) == ()
    assert dims_tuple([2, -1]) == (2, -1)


def test_dims_tuple_rejects_non_integers() -> None:
    with pytest.raises(TypeError, match="dimension 1: expected an integer, got float"):
        dims_tuple([1, 2.5])  # type: ignore[list-item]


def test_tuple_fails_where_safe_tuple_works() -> None:
    with pytest.raises(RuntimeError, match="out_of_range"):
        tuple(NoIterDims(1, 3))
    assert safe_tuple(NoIterDims(1, 3)) == (1, 3)
    assert safe_tuple([1, 2]) == (1, 2) and safe_tuple("ab") == ("a", "b") and safe_tuple() == ()


def test_patch_ultralytics_tensorrt_shadows_tuple_in_that_module(monkeypatch: pytest.MonkeyPatch) -> None:
    module = pytest.importorskip("ultralytics.nn.backends.tensorrt")
    monkeypatch.delattr(module, "tuple", raising=False)  # restores whatever was there after the test
    assert patch_ultralytics_tensorrt() is True
    assert vars(module)["tuple"] is safe_tuple  # module globals win over builtins in its functions
    assert builtins.tuple is not safe_tuple
