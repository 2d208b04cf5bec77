"""A torch forward compiled by inductor (``torch.compile``): the backend's ``graph="inductor"``.

Why: in a TorchScript or eager YOLO on CUDA most of the device time is not convolution. cuDNN's path adds each
convolution's bias in its own broadcasting kernel, then SiLU reads and writes the tensor again, and channel slices
are copied before the next convolution. Inductor takes the bias out of the convolution and fuses the bias, the
activation and the copies into generated kernels. BENCHMARKS.md has the kernel shares and the speed-up.

A TorchScript archive cannot be traced by dynamo, so it is first converted to an exported program (torch's
``TS2EPConverter``) on the first batch. The batch dimension stays dynamic, so the compilations serve every batch
size, and the CUDA graphs (``backends.cuda_graphs``) are then captured over the compiled forward as usual. Compiling
takes tens of seconds, twice (batches of 2 and more, then a batch of 1, which dynamo always specialises), both on
the first call, which ``TorchBackend.warmup`` makes before the first frame.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from inferstream.backends.torch_module import first_line
from inferstream.errors import BackendInitError

# A trace's ``N = H * W`` on shapes becomes NumToTensor, mul, Int; the converter turns that Int into a
# data-dependent scalar, which inductor cannot specialise on. The same product, on ints.
_INT_OF_TENSOR_PRODUCT: Final = """graph(%a, %b):
  %ta = prim::NumToTensor(%a)
  %tb = prim::NumToTensor(%b)
  %m = aten::mul(%ta, %tb)
  %r = aten::Int(%m)
  return (%r)"""
_INT_PRODUCT: Final = """graph(%a, %b):
  %r = aten::mul(%a, %b)
  return (%r)"""


class InductorForward:
    """``model`` (an ``nn.Module``, a TorchScript module or a callable on the batch) compiled on its first call."""

    def __init__(self, model: Callable[..., Any]) -> None:
        self._model = model
        self._compiled: Callable[..., Any] | None = None

    def __call__(self, x: Any) -> Any:
        if self._compiled is None:
            self._compiled = self._compile(x)
        return self._compiled(x)

    def _compile(self, x: Any) -> Callable[..., Any]:
        """The compiled forward, ready for every batch size. BackendInitError: conversion or compilation failed."""
        import torch

        example = x if x.shape[0] > 1 else torch.cat([x, x])  # a batch of 1 would fix the batch size at 1
        try:
            forward = self._model
            if isinstance(forward, torch.jit.ScriptModule):
                forward = _exported(forward, example)
            compiled = torch.compile(forward)
            torch._dynamo.mark_dynamic(example, 0)
            compiled(example)  # every batch size from 2 up
            compiled(example[:1])  # dynamo compiles a batch of 1 on its own: now rather than mid-stream
        except Exception as e:  # torch raises many kinds: the user needs the first line and a way out
            raise BackendInitError(
                f"graph=inductor could not compile the model ({type(e).__name__}: {first_line(e)}); "
                "inductor needs triton on CUDA and a C++ compiler on the CPU; graph=auto runs it without") from e
        return compiled


def _exported(module: Any, x: Any) -> Any:
    """A TorchScript module as an exported program's module, traced on ``x`` (a batch of 2 or more)."""
    import torch
    from torch._export.converter import TS2EPConverter

    graph = module.graph
    torch._C._jit_pass_inline(graph)
    torch._C._jit_pass_custom_pattern_based_rewrite_graph(_INT_OF_TENSOR_PRODUCT, _INT_PRODUCT, graph)
    return TS2EPConverter(module, (x,)).convert().module()
