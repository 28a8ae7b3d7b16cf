"""The packed CPU matmul (templates/cpu/matmul_kernel.cpp.j2) against numpy's single-thread OpenBLAS,
shape by shape, on this machine: a quick development probe, not the bench (bench/cpu_vs_library.py).

Each config is rendered for the `local` target exactly as a build renders it, compiled with the
target's toolchain into a small timing program (one call checked against numpy first), and timed
as the minimum over at least --seconds of back-to-back calls, pinned to one core. numpy runs with
OPENBLAS_NUM_THREADS=1 on the same core into a preallocated ``out=``, minimum over as long.

    python3 bench/probes/cpu_gemm_probe.py --shapes 16x4096x4096,128x128x128 \
        --config MR=14,NR=32,KC=256,MC=128,NC=1024,PACK_B=1 [--config ...] [--core 1]

A config may end in @FLAG to compile it with FLAG in place of the toolchain's -O3 (for example
`...,PACK_B=1@-O2`): the same config at two optimization levels, timed side by side; the compile's
seconds (user + system, of its process) are printed with each config.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/mman.h>
// like numpy's large arrays (and the harness main): 2 MiB aligned, transparent huge pages asked for
static void* big(size_t bytes) {
  void* p = 0;
  if (posix_memalign(&p, 1 << 21, bytes ? bytes : 1)) return 0;
  if (bytes >= (1 << 22)) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}
extern "C" void matmul_kernel(const void*, const void*, void*, int32_t, int32_t, int32_t, int32_t, int32_t,
                              int32_t, int32_t, int32_t, int32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                              uint32_t, uint32_t);
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), nc = atoi(argv[4]);
  const int bt = argc > 8 && argv[8][1] == 'T';  // B stored N x K
  const int sbk = bt ? 1 : N, sbn = bt ? K : 1;
  double seconds = atof(argv[5]);
  float* a = (float*)big(sizeof(float) * M * K); float* b = (float*)big(sizeof(float) * K * N);
  float* c = (float*)big(sizeof(float) * M * N);
  FILE* f = fopen(argv[6], "rb"); fread(a, 4, (size_t)M * K, f); fread(b, 4, (size_t)K * N, f); fclose(f);
  uint32_t gx = (N + nc - 1) / nc;
  #define CALL() for (uint32_t x = 0; x < gx; x++) matmul_kernel(a, b, c, M, N, K, K, 1, sbk, sbn, N, 1, x, 0, 0, gx, 1, 1)
  CALL();
  f = fopen(argv[7], "wb"); fwrite(c, 4, (size_t)M * N, f); fclose(f);
  double best = 1e30, start = now();
  int calls = 1;
  while (now() - start < seconds) {
    double t0 = now();
    for (int i = 0; i < calls; i++) CALL();
    double t = (now() - t0) / calls;
    if (t < best) best = t;
    if (t * calls < 2e-3) calls *= 2;
  }
  printf("%.9f\n", best);
  return 0;
}
"""


def parse_config(text: str) -> dict:
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}


def as_in_space(cfg: dict, M: int, N: int, K: int) -> dict:
    """The config of the space that runs exactly like ``cfg`` on this shape: a KC, MC or NC past its
    dimension acts as the dimension (the template clamps each block), so the space's smallest value
    covering the dimension stands for it (larger ones are pruned as repeats)."""
    from harness.kernels.matmul import CPU_SPACE
    from harness.kernels.matmul.seeds import _block

    return dict(cfg, KC=_block(CPU_SPACE["KC"], cfg["KC"], K, 64), MC=_block(CPU_SPACE["MC"], cfg["MC"], M, 16),
                NC=_block(CPU_SPACE["NC"], cfg["NC"], N, 64))


def numpy_seconds(M, N, K, seconds, layout="NN"):
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    if layout[1] == "T":
        b = b.T.copy().T
    out = np.empty((M, N), np.float32)
    best, start, calls = 1e30, time.perf_counter(), 1
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        for _ in range(calls):
            np.matmul(a, b, out=out)
        t = (time.perf_counter() - t0) / calls
        best = min(best, t)
        if t * calls < 2e-3:
            calls *= 2
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--config", action="append", required=True)
    ap.add_argument("--seconds", type=float, default=1.0, help="timing per contender and shape, in all rounds")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--no-numpy", action="store_true")
    args = ap.parse_args()
    if "OPENBLAS_NUM_THREADS" not in os.environ:  # numpy must see it before it loads OpenBLAS
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    os.sched_setaffinity(0, {args.core})
    import numpy as np

    from harness.compile.cpp import CppCompiler
    from harness.kernels import get
    from harness.shapes import make_shape
    from harness.space import first_pruning_rule
    from harness.targets import load_targets

    kernel = get("matmul")
    target = load_targets(REPO / "targets.yaml")["local"]
    tmp = Path(tempfile.mkdtemp(prefix="gemm-probe-"))
    comp = CppCompiler(kernel, target, tmp)
    (tmp / "driver.cpp").write_text(DRIVER)
    exes = []
    compile_s = []
    for i, text in enumerate(args.config):
        text, _, opt = text.partition("@")
        cfg = parse_config(text)
        src = tmp / ("k%d.cpp" % i)
        src.write_text(comp.render_kernel(cfg, "fp32"))
        exe = tmp / ("k%d" % i)
        flags = [g for f in comp.tc.flags for g in (opt.split() if (f == "-O3" and opt) else [f])]
        before = os.times()
        subprocess.run(comp.tc.cxx + flags + ["-I", str(REPO / "templates" / "cpu"), str(src),
                                              str(tmp / "driver.cpp"), "-o", str(exe)], check=True)
        after = os.times()
        compile_s.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
        exes.append((cfg, exe))
    for shape in args.shapes.split(","):
        dims, _, layout = shape.partition(":")
        layout = layout or "NN"  # A is always stored M x K; B K x N (NN) or N x K (NT)
        M, N, K = (int(x) for x in dims.split("x"))
        rng = np.random.default_rng(1)
        a = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
        (tmp / "in.bin").write_bytes(a.tobytes() + (b.T.copy() if layout[1] == "T" else b).tobytes())
        ref = a.astype(np.float64) @ b.astype(np.float64)
        flop = 2.0 * M * N * K
        # rounds: numpy and every config in turn, each for --seconds / --rounds; the minimum of all rounds
        # (a burst of other load on the shared machine then hits every contender alike)
        np_best, best, wrong = float("inf"), [float("inf")] * len(exes), [""] * len(exes)
        per = args.seconds / args.rounds
        for _ in range(args.rounds):
            if not args.no_numpy:
                np_best = min(np_best, numpy_seconds(M, N, K, per, layout))
            for i, (cfg, exe) in enumerate(exes):
                out = subprocess.run(["taskset", "-c", str(args.core), str(exe), str(M), str(N), str(K),
                                      str(max(cfg["NC"] // cfg["NR"], 1) * cfg["NR"]), str(per), str(tmp / "in.bin"),
                                      str(tmp / "out.bin"), layout], capture_output=True, text=True, check=True).stdout
                best[i] = min(best[i], float(out))
                c = np.fromfile(tmp / "out.bin", np.float32).reshape(M, N)
                err = np.linalg.norm(c - ref) / max(np.linalg.norm(ref), 1e-30)
                wrong[i] = "" if err < 1e-5 else " WRONG %.1e" % err
        np_gf = 0.0 if args.no_numpy else flop / np_best / 1e9
        line = "%-16s numpy %7.1f" % (shape, np_gf)
        allowed = []
        for i, (cfg, _) in enumerate(exes):
            gf = flop / best[i] / 1e9
            pruned = first_pruning_rule(kernel.rules_for(target), as_in_space(cfg, M, N, K), make_shape(M, N, K, "fp32", layout), target)
            mark = " pruned:%s" % pruned.name if pruned else ""
            if not pruned and not wrong[i]:
                allowed.append((gf, i))
            line += " | %7.1f (%.2fx)%s%s" % (gf, gf / np_gf if np_gf else 0, wrong[i], mark)
        if allowed and np_gf:
            gf, i = max(allowed)
            line += " || best allowed: config %d, %.2fx" % (i, gf / np_gf)
        print(line, flush=True)
    for i, (cfg, _) in enumerate(exes):
        print("config %d: %s%s, compiled in %.2f s" % (i, ",".join("%s=%d" % kv for kv in cfg.items()),
                                                      " @" + args.config[i].partition("@")[2] if "@" in args.config[i] else "",
                                                      compile_s[i]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
