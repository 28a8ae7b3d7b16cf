"""Add two deliberately broken variants to a GPU bundle, to see the agent survive them on a GPU.

    python bench/gpu_faults.py --bundle build/gpu-node/matmul --out build/gpu-node/matmul-faults

copies the bundle and adds, for its first shape, a variant whose kernel writes to an illegal
address (the worker's CUDA context dies: ``crash``) and one whose kernel spins forever
(``timeout``; the worker is killed and replaced). Every other job must still come out ``ok``.
Runs on the host (compiles with Triton); the copy is what goes to the GPU node.
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@triton.jit
def fault_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, lock_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                 stride_cm, stride_cn, MODE: tl.constexpr):
    if MODE == 0:  # illegal address: far past any allocation
        offs = tl.arange(0, 128).to(tl.int64) + (1 << 44)
        tl.store(c_ptr + offs, tl.zeros((128,), dtype=c_ptr.dtype.element_ty))
    else:  # spin forever on a volatile load that never changes
        x = tl.load(a_ptr, volatile=True)
        while x == x:
            x = tl.load(a_ptr, volatile=True)
        tl.store(c_ptr, x)


def main(argv=None):
    from harness.compile.triton_gpu import run_compile_process, TRITON_TYPES, warp_size_for

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    src, out = Path(args.bundle), Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    m = json.loads((out / "manifest.json").read_text())
    shape = m["shapes"][0]
    target = m["target"]
    backend, arch = target["backend"], str(target["gpu_arch"])
    names = ["a_ptr", "b_ptr", "c_ptr", "ws_ptr", "lock_ptr", "M", "N", "K", "stride_am", "stride_ak",
             "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
    ptr = TRITON_TYPES[shape["dtype"]]
    sig = {n: (ptr if n in ("a_ptr", "b_ptr", "c_ptr") else "*fp32" if n == "ws_ptr" else "*i32"
               if n == "lock_ptr" else "i32") for n in names}
    for mode, name in ((0, "fault_illegal_address"), (1, "fault_hang")):
        job = {"module": "bench.gpu_faults", "fn": "fault_kernel", "signature": dict(sig, MODE="constexpr"),
               "constexprs": {"MODE": mode}, "divisible": [], "options": {"num_warps": 4},
               "backend": backend, "arch": arch, "warp_size": warp_size_for(backend, arch)}
        artifact = out / "artifacts" / ("%s.%s" % (name, "cubin" if backend == "cuda" else "hsaco"))
        res = run_compile_process(job, artifact, 300)
        if res.status != "ok":
            raise SystemExit("%s: %s" % (name, res.message))
        import hashlib

        m["variants"].append({"id": name, "config": {"fault": name}, "dtype": shape["dtype"],
                              "specialization": [], "status": "ok",
                              "artifact": str(artifact.relative_to(out)),
                              "sha256": hashlib.sha256(artifact.read_bytes()).hexdigest(), "message": "",
                              "launch": res.launch, "compile_seconds": res.seconds})
        m["jobs"].insert(len(m["jobs"]) // 2, {"variant": name, "shape": shape["id"], "grid": [1, 1, 1]})
    if "fault" not in m["config_names"]:
        m["config_names"].append("fault")
    (out / "manifest.json").write_text(json.dumps(m, indent=1))
    print("wrote %s with %d jobs (2 faulty)" % (out, len(m["jobs"])))


if __name__ == "__main__":
    main()
