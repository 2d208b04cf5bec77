"""An MLServer runtime that runs one ONNX file on onnxruntime (CPU): the tests' second KServe v2 server.

Runs in ``.triton-venv``; ``launch.start_mlserver`` writes the settings that name this class and the file.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        self._session = ort.InferenceSession(self.settings.parameters.uri, sess_options=opts,
                                             providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0]).astype(np.float32)
        fixed = self._input.shape[0] if isinstance(self._input.shape[0], int) else len(x)
        parts = [self._session.run(None, {self._input.name: x[i:i + fixed]}) for i in range(0, len(x), fixed)]
        outs = [np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]
        return InferenceResponse(model_name=self.name, outputs=[
            NumpyCodec.encode_output(o.name, a) for o, a in zip(self._session.get_outputs(), outs)])
