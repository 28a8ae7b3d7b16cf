"""Compile for gfx950 every config a tune measured on another target (an H200), on this host.

There is no MI355 here: the check is that the exact configs an sm90 tune built also compile for
gfx950 (Triton's AMD backend, scaled fp4 MFMAs), each with the AMD-only parameters at their first
values in the kernel's space (``waves_per_eu`` 0, ``matrix_instr_nonkdim`` 16) and specialized for
every shape it ran on, as a gfx950 build would. Pruning rules are not applied (a rule is about
speed on the machine, not about whether the source compiles); a compiled variant over gfx950's
160 KiB of LDS per workgroup is reported as such.

    python3 -m harness.kernels.a4w4_blockscale.gfx950_check RESULTS.csv [--out DIR] [--jobs N]

prints one line per (config, shape) that did not compile and a summary line; exit status 1 when
any did not compile, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...errors import HarnessError
from ...targets import Target
from . import GPU_SPACE, GPU_SPACE_HIP, KERNEL, PROBLEM

GFX950 = Target(name="gfx950-check", arch="x86_64", backend="hip", toolchain="triton", gpu_arch="gfx950",
                shared_mem_max=163840, multiprocessors=256, profiler="events")
CONFIG_PREFIX = "cfg_"


def tuned_configs(results_csv: Path) -> list:
    """[(config, shape)] of every kernel row (not ``lib:``) of a results CSV, each pair once."""
    import pandas as pd

    from ...shapes import make_problem_shape

    try:
        df = pd.read_csv(results_csv)
    except (OSError, ValueError) as exc:
        raise HarnessError("cannot read the results: %s" % exc, where=str(results_csv))
    missing = [c for c in ["variant_id", "M", "N", "K"] + [CONFIG_PREFIX + n for n in GPU_SPACE] if c not in df]
    if missing:
        raise HarnessError("not a%s results file: no column %s" % (" " + KERNEL.name, ", ".join(missing)),
                           where=str(results_csv))
    rows = df[~df["variant_id"].astype(str).str.startswith("lib:")]
    if "kernel" in rows:
        rows = rows[rows["kernel"] == KERNEL.name]
    seen, out = set(), []
    for _, row in rows.iterrows():
        config = {n: int(row[CONFIG_PREFIX + n]) for n in GPU_SPACE}
        config.update({n: values[0] for n, values in GPU_SPACE_HIP.items()})
        dims = {d: int(row[d]) for d in ("M", "N", "K")}
        key = json.dumps([config, dims], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append((config, make_problem_shape(PROBLEM, dims, "mxfp4")))
    if not out:
        raise HarnessError("no %s kernel row to check" % KERNEL.name, where=str(results_csv))
    return out


def check(pairs: list, out_dir: Path, jobs: int = 2, timeout: float = 300.0) -> list:
    """[(config, shape, CompileResult)] of each pair compiled for gfx950."""
    from ...compile.triton_gpu import TritonGpuCompiler

    compiler = TritonGpuCompiler(KERNEL, GFX950, out_dir)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda p: compiler.compile(p[0], p[1], timeout), pairs))
    return [(c, s, r) for (c, s), r in zip(pairs, results)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m harness.kernels.a4w4_blockscale.gfx950_check",
                                     description=__doc__.strip().splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="artifact folder (default: a temporary one)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        pairs = tuned_configs(args.results)
    except HarnessError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results = check(pairs, args.out or Path(tmp), args.jobs)
    bad = [(c, s, r) for c, s, r in results if r.status != "ok"]
    for config, shape, res in bad:
        print("%dx%dx%d %s: %s %s" % (shape.M, shape.N, shape.K, json.dumps(config, sort_keys=True), res.status,
                                      res.message.splitlines()[0] if res.message else ""))
    configs = len({json.dumps(c, sort_keys=True) for c, _, _ in results})
    over = sum(1 for _, _, r in bad if r.status == "pruned")  # compiled, over gfx950's LDS
    extra = " (%d more compiled over gfx950's LDS)" % over if over else ""
    print("gfx950: %d of %d (config, shape) variants compiled (%d configs)%s" % (
        len(results) - len(bad), len(results), configs, extra))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
