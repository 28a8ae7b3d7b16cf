"""How far can a per-shape tuner get over cuBLAS with kernels as good as cuBLAS's own? (GPU node)

    python3 bench/cublaslt_ceiling.py SHAPES_FILE [SHAPES_FILE ...] [--algos 32] [--json OUT]

For each shape it asks cuBLASLt's heuristic for up to --algos kernels (tile, stages, split-K,
cluster), checks each one's answer against torch.matmul, times each with do_bench (median, the
L2 flush written, as bench/gpu_quality.py times torch.matmul), then times the three fastest again
beside torch.matmul in four palindromic rounds. It prints torch.matmul's time over the best of
cuBLAS's kernels for that shape: the uplift that tuning alone (picking, per shape, among kernels of
cuBLAS's quality) gets over the library's own pick. The summary line gives the geomean and the
time-weighted speedup (sum of torch's times over sum of the best), the two figures issue 11 asks
of the harness (1.05 and 1.10x).

Needs the node's torch (for the inputs, the reference and the library it links: libcublasLt) and
triton (do_bench); loads cuBLASLt with ctypes.
"""

import argparse
import ctypes
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a script: the repository root
from bench._gpu_common import do_bench_median_ms, geomean, interleaved_medians, make_inputs, rel_err  # noqa: E402

COMPUTE_32F = 68  # cublasComputeType_t
CUDA_TYPES = {"fp16": 2, "bf16": 14, "fp32": 0}  # cudaDataType_t
DESC_TRANSA, DESC_TRANSB = 3, 4  # cublasLtMatmulDescAttributes_t
PREF_MAX_WORKSPACE = 1  # cublasLtMatmulPreferenceAttributes_t
CONFIG_FIELDS = (("algo", 0, ctypes.c_int32), ("tile", 1, ctypes.c_uint32), ("split_k", 2, ctypes.c_uint32),
                 ("stages", 6, ctypes.c_uint32), ("cluster", 8, ctypes.c_uint16))
WORKSPACE = 32 << 20
TOP = 3


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def load_cublaslt():
    """libcublasLt as torch has it: by its sonames, else from the nvidia wheels beside torch."""
    import torch

    names = ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    site = os.path.dirname(os.path.dirname(torch.__file__))
    names += sorted(glob.glob(os.path.join(site, "nvidia", "**", "libcublasLt.so*"), recursive=True))
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise SystemExit("cuBLASLt cannot be loaded (tried %s)" % ", ".join(names))


def transposed_operand(strides, rows, cols):
    """A logical matrix t (cols x rows, strides as given) seen as its transpose, rows x cols, by
    cuBLAS's column-major convention: (op, stored rows, stored cols, leading dimension). Where t's
    rows are contiguous its transpose is column-major as stored (op N); else t itself is, and op T
    transposes it."""
    if strides[1] == 1:
        return 0, rows, cols, strides[0]
    return 1, cols, rows, strides[1]


class Lt(object):
    """cuBLASLt through ctypes: one handle, a matmul's descriptors, its heuristic's kernels."""

    def __init__(self, lib):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self.check(lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        self.preference = ctypes.c_void_p()  # the same for every shape: the workspace it may use
        self.check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(self.preference)), "preference")
        ws = ctypes.c_uint64(WORKSPACE)
        self.check(lib.cublasLtMatmulPreferenceSetAttribute(self.preference, PREF_MAX_WORKSPACE, ctypes.byref(ws),
                                                            ctypes.c_size_t(8)), "workspace")

    @staticmethod
    def check(status, what):
        if status != 0:
            raise RuntimeError("%s: cuBLAS status %d" % (what, status))

    def layout(self, dtype, rows, cols, ld):
        out = ctypes.c_void_p()
        self.check(self.lib.cublasLtMatrixLayoutCreate(ctypes.byref(out), CUDA_TYPES[dtype], ctypes.c_uint64(rows),
                                                       ctypes.c_uint64(cols), ctypes.c_int64(ld)), "layout")
        return out

    def plan(self, s, a_log, b_log):
        """Row-major C (M x N) = A @ B as column-major C^T (N x M) = B^T A^T: each operand is a
        column-major matrix with op N where its logical rows are contiguous, else op T."""
        M, N, K = s["M"], s["N"], s["K"]

        def operand(t, rows, cols):
            op, r, c, ld = transposed_operand(t.stride(), rows, cols)
            return op, self.layout(s["dtype"], r, c, ld)

        op_a, lay_a = operand(b_log, N, K)
        op_b, lay_b = operand(a_log, K, M)
        lay_c = self.layout(s["dtype"], N, M, N)
        desc = ctypes.c_void_p()
        self.check(self.lib.cublasLtMatmulDescCreate(ctypes.byref(desc), COMPUTE_32F, CUDA_TYPES["fp32"]), "desc")
        for attr, op in ((DESC_TRANSA, op_a), (DESC_TRANSB, op_b)):
            v = ctypes.c_int32(op)
            self.check(self.lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), ctypes.c_size_t(4)),
                       "trans")
        return desc, lay_a, lay_b, lay_c

    def heuristics(self, plan, count):
        desc, lay_a, lay_b, lay_c = plan
        results = (HeuristicResult * count)()
        found = ctypes.c_int()
        self.check(self.lib.cublasLtMatmulAlgoGetHeuristic(self.handle, desc, lay_a, lay_b, lay_c, lay_c,
                                                           self.preference, count, results, ctypes.byref(found)),
                   "heuristic")
        return [results[i] for i in range(found.value) if results[i].state == 0]

    def describe(self, result):
        out = {}
        for name, attr, ctype in CONFIG_FIELDS:
            v, written = ctype(), ctypes.c_size_t()
            status = self.lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(result.algo), attr, ctypes.byref(v),
                                                                   ctypes.c_size_t(ctypes.sizeof(v)),
                                                                   ctypes.byref(written))
            out[name] = v.value if status == 0 else None
        out["workspace"] = result.workspace
        return out

    def launcher(self, plan, result, a_log, b_log, c, workspace, torch):
        desc, lay_a, lay_b, lay_c = plan
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        args = (self.handle, desc, ctypes.byref(one), ctypes.c_void_p(b_log.data_ptr()), lay_a,
                ctypes.c_void_p(a_log.data_ptr()), lay_b, ctypes.byref(zero), ctypes.c_void_p(c.data_ptr()), lay_c,
                ctypes.c_void_p(c.data_ptr()), lay_c, ctypes.byref(result.algo), ctypes.c_void_p(workspace.data_ptr()),
                ctypes.c_size_t(WORKSPACE))

        def launch():
            self.check(self.lib.cublasLtMatmul(*args, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                       "cublasLtMatmul")
        return launch


def probe_shape(torch, lt, workspace, s, count, rounds):
    a, b, a_log, b_log = make_inputs(s, seed=1)
    ref = torch.matmul(a_log, b_log)
    c = torch.empty((s["M"], s["N"]), dtype=a.dtype, device="cuda")
    plan = lt.plan(s, a_log, b_log)
    kernels = []
    for rank, result in enumerate(lt.heuristics(plan, count)):
        launch = lt.launcher(plan, result, a_log, b_log, c, workspace, torch)
        c.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        err = rel_err(c, ref)
        entry = dict(lt.describe(result), rank=rank, rel_err=err)
        if not err < 1e-2:
            entry["status"] = "wrong_answer"
        else:
            entry["status"], entry["screen_ms"] = "ok", do_bench_median_ms(launch)
            entry["launch"] = launch
        kernels.append(entry)
    ok = sorted((k for k in kernels if k["status"] == "ok"), key=lambda k: k["screen_ms"])
    if not ok:
        raise SystemExit("%s: no cuBLASLt kernel gave a right answer" % s["text"])
    top = ok[:TOP]
    medians, _ = interleaved_medians([lambda: torch.matmul(a_log, b_log)] + [k["launch"] for k in top], rounds)
    torch_ms, best_i = medians[0], min(range(len(top)), key=lambda i: medians[1 + i])
    for k in kernels:
        k.pop("launch", None)
    return {"shape": s["text"], "torch_ms": torch_ms, "best_ms": medians[1 + best_i], "best": top[best_i],
            "kernels": kernels, "right": len(ok), "offered": len(kernels), "ratio": torch_ms / medians[1 + best_i]}


def read_shapes(paths):
    from harness.shapes import read_shapes_file

    out = []
    for path in paths:
        for sh in read_shapes_file(path, default_dtype="fp16"):
            out.append(dict(sh.dim_values, dtype=sh.dtype, layout=sh.layout,
                            text="%dx%dx%d:%s:%s" % (sh.M, sh.N, sh.K, sh.dtype, sh.layout)))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shapes_files", nargs="+", help="shapes files (M x N x K : dtype : layout a line)")
    p.add_argument("--algos", type=int, default=32, help="kernels asked of the heuristic a shape (default 32)")
    p.add_argument("--rounds", type=int, default=4, help="palindromic rounds of the final timing (default 4)")
    p.add_argument("--json", help="write every shape's kernels and times here")
    args = p.parse_args(argv)
    shapes = read_shapes(args.shapes_files)
    import torch

    lt = Lt(load_cublaslt())
    workspace = torch.empty(WORKSPACE, dtype=torch.uint8, device="cuda")
    print("%-26s %10s %10s %7s  %s" % ("shape", "torch us", "best us", "ratio", "best of cuBLAS's kernels"))
    table = []
    for s in shapes:
        row = probe_shape(torch, lt, workspace, s, args.algos, args.rounds)
        b = row["best"]
        print("%-26s %10.1f %10.1f %7.3f  the heuristic's no. %d (%d of %d offered right): algo %s tile %s stages %s "
              "split_k %s cluster %s" % (row["shape"], row["torch_ms"] * 1e3, row["best_ms"] * 1e3, row["ratio"],
                                         b["rank"], row["right"], row["offered"], b["algo"], b["tile"], b["stages"],
                                         b["split_k"], b["cluster"]), flush=True)
        table.append(row)
    ratios = [r["ratio"] for r in table]
    summary = {"shapes": len(table), "geomean": geomean(ratios), "worst": min(ratios), "best": max(ratios),
               "median": statistics.median(ratios),
               "weighted": sum(r["torch_ms"] for r in table) / sum(r["best_ms"] for r in table)}
    print("torch.matmul over the best of cuBLAS's own kernels, per shape: geomean %.3f, median %.3f, "
          "range %.3f to %.3f; time-weighted %.3fx over %d shapes" % (
              summary["geomean"], summary["median"], summary["worst"], summary["best"], summary["weighted"],
              summary["shapes"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "shapes": table}, f, indent=1)


if __name__ == "__main__":
    main()
