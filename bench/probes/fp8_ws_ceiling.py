"""Probe: where the fp8 WS kernel's promotion time goes, with and without memory traffic.

Builds probe-only copies of harness/kernels/fp8_blockscale/gluon_kernel.py (patched source in a
temporary module; the product kernel is not touched) and times them on a GPU node against the
unpatched kernel, in one process:

* ``noload``: the loader fills the ring once (its first STAGES slots) and then only arrives on
  each slot's ready barrier, so the consumers run the same MMAs on the same shared memory with no
  TMA traffic at all (answers wrong);
* promotion modes of the plain consumer (PIPE = 0): ``real`` (the kernel's), ``col0`` (every
  step's A scales from K step 0's column: the same loads, always hitting L1), ``bcast`` (one A
  scale for all rows: one address a step), ``const`` (acc + partial x a constant: the same FFMAs,
  no scale loads), ``chain`` (no promotion: the MMAs accumulate into the partial, one wait a
  step, as a kernel without scales would);
* PIPE = 1 with ``real``, ``col0`` or ``const`` promotion.

If ``const`` under ``noload`` runs near ``chain`` under ``noload``, the multiprocessor overlaps the
promotion's FFMAs with the MMAs and what is lost in the real kernel comes with the memory traffic;
if it stays about a fifth below, the FFMAs and the MMAs do not overlap even without any.

With ``--tile BMxBNxSTAGES`` (repeatable; one-part tiles, 64-row consumers) it times ``chain``
with and without the ring's loads for each tile instead, beside the shared-memory bytes a K step
moves per clock of MMA (``smem_bytes_per_mma_clock``): what tests whether shared memory's
bandwidth (128 bytes a clock a multiprocessor) is the frame's ceiling. Tiles past the kernel's
rules (128 x 256: no promotion fits its registers) are built here all the same: chain needs no
partial.

    python3 -m bench.probes.fp8_ws_ceiling [--shape 4096x7168x16384 ...] [--tile 128x256x3 ...] [--json OUT]
"""
import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile

from bench.probes import fp8_ws_probe as probe

DEFAULT_SHAPES = ["4096x7168x16384", "4096x4096x7168"]
KERNEL_FILE = os.path.join(os.path.dirname(__file__), "..", "..", "harness", "kernels", "fp8_blockscale",
                           "gluon_kernel.py")
# (name, loads, promotion, PIPE, stages)
VARIANTS = [(load + " " + promo + (" pipe" if pipe else ""), load, promo, pipe, 5 if pipe else 6)
            for load in ("load", "noload") for promo, pipe in (("real", 0), ("col0", 0), ("bcast", 0), ("const", 0),
                                                              ("chain", 0), ("real", 1), ("col0", 1), ("const", 1))]


def smem_bytes_per_mma_clock(bm: int, bn: int, loads: bool = True) -> float:
    """Shared-memory bytes a 128-wide K step moves per clock of fp8 MMA on sm90 (4096 MACs a clock
    a multiprocessor): each 64-row consumer's wgmma reads its 64 rows of A and all of B, and the
    ring's TMA writes A and B once (``loads``)."""
    reads = (bm // 64) * (64 + bn) * 128
    writes = (bm + bn) * 128 if loads else 0
    return (reads + writes) / (bm * bn * 128 / 4096)


def _sub(src: str, old: str, new: str, count: int = 1) -> str:
    if src.count(old) < count:
        raise SystemExit("fp8_ws_ceiling: the kernel source changed; %r not found %d times" % (old[:60], count))
    return src.replace(old, new)


def patched_source(noload: bool, promo: str) -> str:
    """gluon_kernel.py with the loader and promotion changed as the variant says."""
    src = open(KERNEL_FILE).read()
    # the copy is loaded as a module of its own: its relative imports made absolute
    src = _sub(src, "from ..matmul.gluon_kernel import", "from harness.kernels.matmul.gluon_kernel import")
    src = re.sub(r"^from \.(\w+) import", r"from harness.kernels.fp8_blockscale.\1 import", src, flags=re.M)
    if noload:  # after its first STAGES slots the loader only arrives on the ready barrier
        loop = re.search(r"( {12}k = kk \* BLOCK_K\n)(.*?)( {12}step \+= 1\n)", src, re.S)
        body = "".join("    " + line + "\n" for line in (loop.group(1) + loop.group(2)).splitlines())
        src = src[:loop.start()] + ("            if step >= STAGES:\n                mbarrier.arrive(bar)\n"
                                    "            else:\n" + body + loop.group(3)) + src[loop.end():]
    if promo == "const":
        src = _sub(src, "        return acc + part * (a_s * s0)[:, None]", "        return acc + part * 0.5")
        src = _sub(src, "(a1 * b1)[:, None]", "0.5")
        src = _sub(src, "(a0 * b0)[:, None]", "0.5")
    elif promo == "col0":  # every step's A scales from K step 0's column: always an L1 hit after the first
        src = re.sub(r"gl\.load\(a_scale_rows \+ [^)]*\) \* stride_ask\)", "gl.load(a_scale_rows)", src)
        src = re.sub(r"gl\.load\(a_scale_rows \+ [a-z0-9 ()+]*\* stride_ask\)", "gl.load(a_scale_rows)", src)
    elif promo == "bcast":  # one A scale for all rows (one address, plain consumer only)
        src = _sub(src, "            a_s = gl.load(a_scale_rows + kk * stride_ask)",
                   "            a_s = gl.load(a_scale_ptr + (rows - rows) + kk * stride_ask)")
    elif promo == "chain":  # the MMAs accumulate; nothing is promoted (plain consumer only)
        src = _sub(src, "        return acc + part * (a_s * s0)[:, None]", "        return part")
        src = _sub(src, "        return acc + part * (a_s[:, None] * b_s[None, :])", "        return part")
        src = _sub(src, "            part = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), part, use_acc=False, "
                        "is_async=True)",
                   "            part = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), part, use_acc=kk > 0, "
                   "is_async=True)")
    return src


def load_kernel(noload: bool, promo: str, tmp: str):
    name = "fp8_ws_ceiling_%s_%s" % ("noload" if noload else "load", promo)
    path = os.path.join(tmp, name + ".py")
    with open(path, "w") as f:
        f.write(patched_source(noload, promo))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.fp8_blockscale_ws_kernel


def _problem(torch, spec):
    """(A, B, A scales, B scales, reference, C, flop) of shape ``spec`` on the GPU, announced."""
    M, N, K = (int(x) for x in spec.split("x"))
    a, b, a_s, b_s = probe.make_inputs(torch, M, N, K)
    ref = probe.reference(torch, a, b, a_s, b_s)
    c = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * M * N * K
    print("%s (%.2f TFLOP)" % (spec, flop / 1e12), flush=True)
    return a, b, a_s, b_s, ref, c, flop


def _kernel(kernels, load, promo, tmp):
    """The patched kernel of (``load``, ``promo``), built once."""
    if (load, promo) not in kernels:
        kernels[load, promo] = load_kernel(load == "noload", promo, tmp)
    return kernels[load, promo]


def _failed(name, exc):
    print("  %-22s failed: %s" % (name, (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]), flush=True)


def _write_json(path, rows):
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


def run(args):
    import torch
    import triton

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    props = torch.cuda.get_device_properties(0)
    print("device %s, %d SMs, torch %s, triton %s" % (props.name, props.multi_processor_count, torch.__version__,
                                                      triton.__version__), flush=True)
    tmp = tempfile.mkdtemp()
    kernels = {}
    rows = []
    if args.tile:
        return run_tiles(args, torch, props, tmp, kernels)
    for spec in args.shape or DEFAULT_SHAPES:
        a, b, a_s, b_s, ref, c, flop = _problem(torch, spec)
        results = []
        for name, load, promo, pipe, stages in VARIANTS:
            try:
                launch = probe.ws_launch(torch, a, b, a_s, b_s, c, 128, 128, stages, 8, props.multi_processor_count,
                                         pipe=pipe, kernel=_kernel(kernels, load, promo, tmp))
                results.append(probe.measure(torch, name, launch, c, ref, flop, None))
            except Exception as exc:  # a probe: report and go on
                _failed(name, exc)
        rows.append(dict(shape=spec, results=results))
    _write_json(args.json, rows)


def run_tiles(args, torch, props, tmp, kernels):
    """``chain`` with and without the ring's loads for each --tile, beside its shared-memory model."""
    rows = []
    for spec in args.shape or DEFAULT_SHAPES:
        a, b, a_s, b_s, ref, c, flop = _problem(torch, spec)
        for tile in args.tile:
            bm, bn, stages = (int(x) for x in tile.split("x"))
            for load in ("load", "noload"):
                model = smem_bytes_per_mma_clock(bm, bn, load == "load")
                name = "%s %s chain" % (tile, load)
                try:
                    launch = probe.ws_launch(torch, a, b, a_s, b_s, c, bm, bn, stages, 8, props.multi_processor_count,
                                             kernel=_kernel(kernels, load, "chain", tmp))
                    r = probe.measure(torch, name, launch, c, ref, flop, None)
                    print("    shared memory %.0f bytes a clock of MMA (bound at 128: %.2f of the MMAs' rate)"
                          % (model, min(1.0, 128 / model)), flush=True)
                    rows.append(dict(r, shape=spec, tile=tile, loads=load == "load", smem_bytes_per_clock=model))
                except Exception as exc:  # a probe: report and go on
                    _failed(name, exc)
    _write_json(args.json, rows)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable); default: %s" % DEFAULT_SHAPES)
    ap.add_argument("--tile", action="append", default=[],
                    help="BMxBNxSTAGES (repeatable): chain with and without loads for these tiles instead")
    ap.add_argument("--json", help="write every measurement here")
    run(ap.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
