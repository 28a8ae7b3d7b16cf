"""The CPU stand-in GPU (tests/gpu_standin.py) taught this folder's kernels: ``softmax_kernel``
and ``softmax_reference`` computed with numpy on the stand-in's memory, and ``torch.softmax`` as
the library. HARNESS_GPU_API=tests.kernels.softmax.standin:SoftmaxStandinApi puts it in the GPU
worker's place, so the whole GPU path of the softmax runs here: its bundle, its device plug-in's
check of the reference kernel, its library rows."""

import contextlib

import numpy as np

from tests.gpu_standin import StandinLibraryApi, _f32_to_bf16


class SoftmaxStandinApi(StandinLibraryApi):
    def _softmax(self, v, t, out_type):
        rows, cols = int(v["ROWS"]), int(v["COLS"])
        x = self._load(v["x_ptr"], t["x_ptr"], rows * cols).reshape(rows, cols).astype(np.float64)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32).ravel()
        out = self._array(v["y_ptr"], out_type, rows * cols)
        out[:] = _f32_to_bf16(y) if out_type == "*bf16" else y.astype(out.dtype)

    def _softmax_kernel(self, facts, v, t, grid):
        self._softmax(v, t, t["y_ptr"])

    def _softmax_reference(self, facts, v, t, grid):
        self._softmax(v, t, t["y_ptr"])

    def library_launcher(self, name):
        if name != "torch.softmax":
            return super().library_launcher(name)

        def launcher(data):
            s = data.shape
            types = {"x_ptr": "*" + s["dtype"], "y_ptr": "*" + s["dtype"]}

            def launch(i, stream=None):
                self._softmax(data.values(i), types, types["y_ptr"])

            return launch, contextlib.nullcontext(), "numpy %s (stand-in)" % np.__version__

        return launcher
