"""Serve one ONNX model on a real Triton server (PyTriton's bundled tritonserver), run by onnxruntime on the CPU.

Runs in ``.triton-venv`` (made by ./setup from the system python: PyTriton needs numpy<2 and a shared libpython),
never in the main venv. The model's first dimension becomes Triton's batch dimension (``max_batch_size``); a graph
with a fixed batch of 1 is run row by row. PyTriton's public ModelConfig has no way to set the model config's
``parameters``, so the file's labels do not reach the client: the caller gives them (pyinfer ``labels``).

    .triton-venv/bin/python tests/servers/pytriton_onnx.py MODEL.onnx --name NAME --http-port P --grpc-port Q \
        [--nhwc-twin]
"""
from __future__ import annotations

import argparse
import logging

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("onnx")
    parser.add_argument("--name", default="model")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--nhwc-twin", action="store_true",
                        help="also serve NAME_nhwc, declared with an NHWC input that inferstream must refuse")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    session = ort.InferenceSession(args.onnx, sess_options=opts, providers=["CPUExecutionProvider"])
    inp = session.get_inputs()[0]
    outs = session.get_outputs()
    fixed_batch = inp.shape[0] if isinstance(inp.shape[0], int) else None

    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        x = inputs[inp.name]
        step = fixed_batch or len(x)
        parts = [session.run(None, {inp.name: x[i:i + step]}) for i in range(0, len(x), step)]
        return {o.name: np.concatenate([p[k] for p in parts]) for k, o in enumerate(outs)}

    def dims(shape: list[object]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else -1 for d in shape[1:])

    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
                          http_address="127.0.0.1", grpc_address="127.0.0.1")
    # loopback only: no endpoint needs PyTriton's access token, so a client may register system shared memory
    with Triton(config=config, security_config=TritonSecurityConfig(restricted_endpoints=[])) as triton:
        triton.bind(
            model_name=args.name,
            infer_func=infer,
            inputs=[Tensor(name=inp.name, dtype=_DTYPES[inp.type], shape=dims(inp.shape))],
            outputs=[Tensor(name=o.name, dtype=_DTYPES[o.type], shape=dims(o.shape)) for o in outs],
            config=ModelConfig(max_batch_size=args.max_batch),
            strict=True,
        )
        if args.nhwc_twin:
            h, w = dims(inp.shape)[1:]
            triton.bind(model_name=f"{args.name}_nhwc", infer_func=infer, strict=True,
                        inputs=[Tensor(name=inp.name, dtype=_DTYPES[inp.type], shape=(h, w, 3))],
                        outputs=[Tensor(name=o.name, dtype=_DTYPES[o.type], shape=dims(o.shape)) for o in outs],
                        config=ModelConfig(max_batch_size=args.max_batch))
        triton.serve()


if __name__ == "__main__":
    main()
