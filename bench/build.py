"""Compile throughput: configs compiled per second per core, native and riscv64 (RVV).

    python3 bench/build.py [--configs 32] [--jobs N]

Each target is built twice into a fresh folder: the first build compiles every config, the
second must compile nothing (content-addressed artifacts) and shows what a rebuild costs.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import kernels  # noqa: E402
from harness.build import BuildOptions, build  # noqa: E402
from harness.shapes import parse_shape_list  # noqa: E402
from harness.targets import Target  # noqa: E402

TARGETS = {
    "native": Target(name="native", arch="native"),
    "riscv64-rvv256": Target(name="rv", arch="riscv64", toolchain="clang", march="rv64gcv", vlen=256),
    "aarch64": Target(name="arm", arch="aarch64", toolchain="clang"),
}


def space_of(n: int) -> dict:
    space = {"BLOCK_M": [4, 8, 16, 32], "BLOCK_N": [8, 16, 32, 64], "BLOCK_K": [8, 16, 32, 64], "GROUP_M": [1, 8]}
    configs = 1
    out = {}
    for name, values in space.items():
        take = max(1, min(len(values), n // configs))
        out[name] = values[:take]
        configs *= take
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    kernel = kernels.get("matmul")
    shapes = parse_shape_list("256x256x256")
    space = space_of(args.configs)
    rows = []
    for label, target in TARGETS.items():
        with tempfile.TemporaryDirectory() as tmp:
            options = BuildOptions(jobs=args.jobs, space=space)
            start = time.perf_counter()
            first = build(kernel, target, shapes, Path(tmp), options)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            second = build(kernel, target, shapes, Path(tmp), options)
            warm = time.perf_counter() - start
        rate = first.compiled / cold
        rows.append((label, first.compiled, cold, rate, rate / args.jobs, second.compiled, warm))
    print("%-16s %8s %8s %10s %14s %14s %8s" % ("target", "configs", "seconds", "configs/s", "configs/s/core",
                                                "rebuild: comp.", "seconds"))
    for r in rows:
        print("%-16s %8d %8.1f %10.2f %14.2f %14d %8.2f" % r)
    print("cores used: %d (os.cpu_count() = %d)" % (args.jobs, os.cpu_count()))


if __name__ == "__main__":
    main()
