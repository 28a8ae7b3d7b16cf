"""The CPU stand-in GPU (tests/gpu_standin.py) taught the MXFP4 GEMM (harness/kernels/a4w4_blockscale):
its fill kernels (random packed codes into ``*u8``, e8m0 scales 124..130 into ``*i8``), its main
and reference kernels (dequantized with the kernel's numpy codec, an fp64 product) and its library
``dequantize+torch.matmul`` (the same product, a bf16 answer). HARNESS_GPU_API=
tests.a4w4_standin:A4w4StandinApi puts it in the GPU worker's place, so the whole GPU path of the
kernel runs here: its bundle, the device plug-in's check of the reference kernel, every answer
checked, the library rows."""

import contextlib

import numpy as np

from tests.gpu_standin import StandinLibraryApi, _f32_to_bf16

BYTES = {"*u8": np.uint8, "*i8": np.int8}


class A4w4StandinApi(StandinLibraryApi):
    def _array(self, ptr, ty, n):
        if ty in BYTES:
            return np.frombuffer(self._buf(ptr), dtype=BYTES[ty], count=int(n))
        return super()._array(ptr, ty, n)

    def _fill_kernel(self, facts, v, t, grid):
        n, ty = int(v["n"]), t["out_ptr"]
        if ty not in BYTES:
            return super()._fill_kernel(facts, v, t, grid)
        rng = np.random.default_rng(int(v["seed"]))
        out = self._array(v["out_ptr"], "*u8", n)
        out[:] = rng.integers(0, 256, n) if ty == "*u8" else rng.integers(124, 131, n)

    def _a4w4_product(self, v):
        from harness.kernels.a4w4_blockscale import mxfp4

        M, N, K = int(v["M"]), int(v["N"]), int(v["K"])
        kb, ks = mxfp4.cdiv(K, 2), mxfp4.cdiv(K, 32)

        def operand(name, rows):
            packed = self._array(v[name + "_ptr"], "*u8", rows * kb).reshape(rows, kb)
            scales = self._array(v[name + "_scale_ptr"], "*u8", rows * ks).reshape(rows, ks)
            return mxfp4.dequantize(packed, scales)[:, :K]

        return M, N, operand("a", M) @ operand("b", N).T

    def _a4w4_blockscale_kernel(self, facts, v, t, grid):
        M, N, C = self._a4w4_product(v)
        out = self._array(v["c_ptr"], t["c_ptr"], M * N)
        out[:] = _f32_to_bf16(C.ravel()) if t["c_ptr"] == "*bf16" else C.ravel().astype(out.dtype)

    def _reference_kernel(self, facts, v, t, grid):
        if t.get("a_ptr") != "*u8":
            return super()._reference_kernel(facts, v, t, grid)
        return self._a4w4_blockscale_kernel(facts, v, t, grid)

    def library_launcher(self, name):
        if name != "dequantize+torch.matmul":
            return super().library_launcher(name)

        def launcher(data):
            types = {"c_ptr": "*bf16"}

            def launch(i, stream=None):
                self._a4w4_blockscale_kernel({}, data.values(i), types, (1, 1, 1))

            return launch, contextlib.nullcontext(), "numpy %s (stand-in)" % np.__version__

        return launcher
