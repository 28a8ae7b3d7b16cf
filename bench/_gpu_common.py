"""What bench/gpu_quality.py and bench/timing_fidelity.py share (run on the GPU node, with torch):
the bundle's cubins launched through the agent's own ctypes driver on torch's stream."""

import csv
import json
import math
import os

from remote_agent.contract import deciding_time
from remote_agent.runners.cuda import CudaApi
from remote_agent.runners.gpu_launch import Kernel, cdiv
from harness.kernels.matmul.device import strides
from remote_agent.runners.gpu_memory import workspace_need

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository

TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def load_bundle(bundle):
    """The manifest of a matmul bundle; each shape's dims (M, N, K) also as keys of the shape."""
    with open(os.path.join(bundle, "manifest.json")) as f:
        manifest = json.load(f)
    for s in manifest["shapes"]:
        s.update(s["dims"])
    return manifest


def read_results(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def open_driver():
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")  # the primary context exists and is current
    api = CudaApi()
    api.init()
    api.open(torch.cuda.current_device())
    return api


def make_inputs(shape, seed=0):
    """A and B in their stored layouts, uniform(-1, 1), and logical views for torch.matmul."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, TORCH_DTYPES[shape["dtype"]])
    M, N, K, lay = shape["M"], shape["N"], shape["K"], shape["layout"]
    a = (torch.rand((K, M) if lay[0] == "T" else (M, K), device="cuda", generator=g) * 2 - 1).to(dt)
    b = (torch.rand((N, K) if lay[1] == "T" else (K, N), device="cuda", generator=g) * 2 - 1).to(dt)
    a_log = a.t() if lay[0] == "T" else a
    b_log = b.t() if lay[1] == "T" else b
    return a, b, a_log, b_log


class Launcher(object):
    """A variant's cubin bound to torch buffers; call() launches on torch's current stream."""

    def __init__(self, api, bundle, variant, shape, grid, a, b, c):
        import torch

        with open(os.path.join(bundle, variant["artifact"]), "rb") as f:
            image = f.read()
        self.kernel = Kernel(api, image, variant["launch"])
        M, N = shape["M"], shape["N"]
        self.grid = tuple(int(g) for g in grid)
        self.ws = self.locks = None
        values = {"a_ptr": a.data_ptr(), "b_ptr": b.data_ptr(), "c_ptr": c.data_ptr(), "M": M, "N": N,
                  "K": shape["K"], "ws_ptr": 0, "lock_ptr": 0}
        values.update(strides(M, N, shape["K"], shape["layout"]))
        need = workspace_need(variant["config"], self.grid, M * N)
        if need:  # split-K or stream-K: an fp32 workspace and zeroed counters, as the agent gives them
            self.ws = torch.zeros(need[0], dtype=torch.float32, device="cuda")
            self.locks = torch.zeros(need[1], dtype=torch.int32, device="cuda")
            values.update(ws_ptr=self.ws.data_ptr(), lock_ptr=self.locks.data_ptr())
        self.params = self.kernel.params(values, self.grid)

    def __call__(self):
        import torch

        self.kernel.run(self.grid, self.params, torch.cuda.current_stream().cuda_stream)


def do_bench_median_ms(fn, warmup=25, rep=100):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def palindromic(n, rounds):
    """The order of ``n`` methods in each of ``rounds`` rounds: an order, then the same backward,
    then the next order and its reverse, ... (A B C, C B A, A C B, B C A, B A C, C A B). Over an even
    number of rounds every method's mean position is the same, so a steady drift of the GPU's
    speed (clocks falling as it heats) weighs on all of them alike (always A before B would charge
    B with the drift of every round); over n! rounds every method also takes every place in a
    round equally often (with A B C, C B A alone B would always be in the middle)."""
    import itertools

    wanted = (rounds + 1) // 2  # the orders used, taken lazily: n! of them is too many to list for n over 9
    orders = [list(p) for p in itertools.islice((p for p in itertools.permutations(range(n)) if p[0] < p[-1]),
                                                 wanted)] or [[0]]
    for r in range(rounds):
        order = orders[(r // 2) % len(orders)]
        yield order if r % 2 == 0 else order[::-1]


def palindromic_windows(windows, rounds, after=None):
    """Each callable's results over ``rounds`` rounds in the orders of ``palindromic``: [[window
    0's results], [window 1's], ...]; ``after``, where given, is called after each window."""
    results = [[] for _ in windows]
    for order in palindromic(len(windows), rounds):
        for i in order:
            results[i].append(windows[i]())
            if after is not None:
                after()
    return results


def interleaved_medians(fns, rounds=4):
    """do_bench medians of each callable in ``rounds`` palindromic rounds: (each one's median over
    the rounds, each one's round medians)."""
    import statistics

    times = palindromic_windows([lambda fn=fn: do_bench_median_ms(fn) for fn in fns], rounds)
    return [statistics.median(t) for t in times], times


def rel_err(c, ref):
    d = (c.float() - ref.float()).norm().item()
    r = ref.float().norm().item()
    return d / r if r else float("inf")


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def ranked_rows(rows):
    """Ok kernel rows per shape id, fastest first by the deciding time (the median on GPUs; library
    rows, ``lib:...``, are not kernels)."""
    out = {}
    for r in rows:
        if r["status"] != "ok" or deciding_time(r) is None or r["variant_id"].startswith("lib:"):
            continue
        out.setdefault(r["shape_id"], []).append(r)
    for ranked in out.values():
        ranked.sort(key=deciding_time)
    return out


def candidate_rows(rows, top, results_path=None):
    """Per shape id, one row of each variant to time again, fastest first: the variants that the
    tune's re-measure compared (its winners.json beside ``results_path``: the --top fastest and the
    fastest seed), else the ``top`` fastest variants. Each variant by its fastest row."""
    listed = {}
    if results_path is not None:
        from harness.remeasure import load_winners

        listed = {sid: [c.get("variant_id") for c in entry.get("candidates") or []]
                  for sid, entry in load_winners(results_path)["shapes"].items()}
    out = {}
    for sid, ranked in ranked_rows(rows).items():
        fastest = {}
        for r in ranked:
            fastest.setdefault(r["variant_id"], r)
        remeasured = [fastest[v] for v in fastest if v in (listed.get(sid) or ())]
        out[sid] = remeasured or list(fastest.values())[:top]
    return out


def job_grid(manifest, variant_id, shape_id):
    for j in manifest["jobs"]:
        if j["variant"] == variant_id and j["shape"] == shape_id:
            return j["grid"]
    raise KeyError((variant_id, shape_id))


__all__ = ["load_bundle", "read_results", "open_driver", "make_inputs", "Launcher", "do_bench_median_ms",
           "rel_err", "geomean", "ranked_rows", "candidate_rows", "job_grid", "cdiv"]
