"""A torch forward compiled by inductor (``torch.compile``): the backend's ``graph="inductor"``.

Why: in a TorchScript or eager YOLO on CUDA most of the device time is not convolution. cuDNN's path adds each
convolution's bias in its own broadcasting kernel, then SiLU reads and writes the tensor again, and channel slices
are copied before the next convolution. Inductor takes the bias out of the convolution and fuses the bias, the
activation and the copies into generated kernels. BENCHMARKS.md has the kernel shares and the speed-up.

Dynamo cannot trace a TorchScript archive, and in an ultralytics module it breaks the graph where the head keeps
Python state of the last input's shape (each batch size then compiles again, up to dynamo's limit). So the forward
is made one graph first: a module is traced (``torch.jit.trace``, as ultralytics' own TorchScript export does), and
the TorchScript converted to an exported program (torch's ``TS2EPConverter``). The batch dimension stays dynamic;
the input's height and width do not (a trace fixes them), so each input size is compiled on its first batch:
pyinfer's size is fixed on CUDA, and a CPU stream's rectangle by its caps. Compiling takes tens of seconds, twice
per size (batches of 2 and more, then a batch of 1, which dynamo always specialises); ``TorchBackend.warmup`` does
it before the first frame at the size it warms up at. The CUDA graphs (``backends.cuda_graphs``) are then captured
over the compiled forward as usual.
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
    """``model`` (an ``nn.Module``, a TorchScript module or a traceable callable on the batch) compiled on its first
    call."""

    def __init__(self, model: Callable[..., Any]) -> None:
        self._model = model
        self._compiled: dict[tuple[int, ...], Callable[..., Any]] = {}  # by input (height, width)

    def __call__(self, x: Any) -> Any:
        size = tuple(x.shape[2:])
        compiled = self._compiled.get(size)
        if compiled is None:  # the trace fixes the input size: a new one is traced and compiled again
            compiled = self._compiled[size] = self._compile(x)
        return compiled(x)

    def _compile(self, x: Any) -> Callable[..., Any]:
        """The compiled forward for ``x``'s input size, ready for every batch size. BackendInitError: tracing,
        conversion or compilation failed."""
        import torch

        example = x if x.shape[0] > 1 else torch.cat([x, x])  # a batch of 1 would fix the batch size at 1
        try:
            traced: Any = self._model
            if not isinstance(traced, torch.jit.ScriptModule):
                trace: Any = torch.jit.trace
                traced = trace(traced, example, check_trace=False)
            compiled: Any = torch.compile(_exported(traced, example))
            torch._dynamo.mark_dynamic(example, 0)
            compiled(example)  # every batch size from 2 up
            compiled(example[:1])  # dynamo compiles a batch of 1 on its own: now rather than mid-stream
        except Exception as e:  # torch raises many kinds: the user needs the first line and a way out
            raise BackendInitError(
                f"graph=inductor could not compile the model ({type(e).__name__}: {first_line(e)}); "
                "inductor needs triton on CUDA and a C++ compiler on the CPU; graph=auto runs it without") from e
        compiled_forward: Callable[..., Any] = compiled
        return compiled_forward


def _exported(module: Any, x: Any) -> Any:
    """A TorchScript module as an exported program's module, traced on ``x`` (a batch of 2 or more)."""
    import torch
    from torch._export.converter import TS2EPConverter

    graph = module.graph
    torch._C._jit_pass_inline(graph)
    torch._C._jit_pass_custom_pattern_based_rewrite_graph(_INT_OF_TENSOR_PRODUCT, _INT_PRODUCT, graph)
    return TS2EPConverter(module, (x,)).convert().module()
