"""The tuned CPU kernel against the library row and against numpy's OpenBLAS, shape by shape.

    python3 bench/cpu_vs_library.py [--shapes-file bench/shapes/cpu_gemms.txt] [--workdir DIR]
                                    [--results results.csv] [-- extra harness tune arguments]

Without ``--results`` it runs ``harness tune matmul --target local --library`` on the shapes (in
``--workdir``, a fresh temporary project by default; arguments after ``--`` go to the tune, e.g.
``-- --strategy random --budget 8`` for a short one) and reads the results it wrote; with
``--results`` it reads that file instead. ``--dtype bf16`` tunes the file's fp32 shapes as bf16 (inputs
and C in bf16, fp32 sums) against the bf16 library row (OpenBLAS's ``cblas_sbgemm`` where the build
has it; the builds here do not, so the row is ``lib:reference``, the kernel's own template at one
fixed config, and the bench says so); numpy, which has no bf16 GEMM, is then timed in fp32 on the
same shapes, for scale only. Then, for each shape of the file, it times numpy's
matmul in this process: ``OPENBLAS_NUM_THREADS=1`` set before numpy is imported, pinned to the
core the library row ran on (the row's ``pinned_cpu``), a preallocated ``out=``, operands stored
as the shape's layout says (``NT``: B stored N x K and passed as ``b.T``), the minimum per-call
time over at least ``--seconds`` (0.5) of samples, those during which the OS switched the process
out set aside (as the harness's agent does for the library row and the kernels). numpy's time includes its own call overhead
(printed once, from a 1 x 1 x 1 product), which the library row, called from C, does not pay.

numpy is timed interleaved with the library row itself: the library's program from the tune's
bundle (``--bundle``, default the one beside the results) is started again on the same core and
asked for a sample after each numpy sample, over the protocol of templates/cpu/main.cpp.j2 (so
its answer is checked again and it is timed by its own main, as in the tune). On a shared machine
the speed of GEMMs with large operands swings by 2x and more within minutes (memory bandwidth);
two timings taken minutes apart would compare those swings, not the libraries.

It prints per shape: its class, the tuned kernel's GFLOP/s and the library row's in the tune
(fastest ok rows), the library row's and numpy's GFLOP/s measured interleaved, library/numpy
(interleaved) and tuned/library (both from the tune, where the agent interleaved them), and the
build and core the library row names; then per class the geomean of both ratios; its last line
the geomeans over every shape and the worst shape of each ratio. Classes (issue 39): ``decode``
M <= 16 with N and K from 512 to 8192; ``small`` every side <= 384; ``prefill`` M from 32 to 256
(the first that fits, in that order).
"""

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # before numpy is imported: numpy's OpenBLAS on one thread
# an inherited OPENBLAS_CORETYPE would run older kernels than the CPU has, in numpy and in the
# library's program alike: set aside, as the agent does for the library row
CORETYPE_SET_ASIDE = os.environ.pop("OPENBLAS_CORETYPE", None)

import argparse  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # remote_agent: the library row's program is started as the agent starts it
DEFAULT_SHAPES = os.path.join(ROOT, "bench", "shapes", "cpu_gemms.txt")
CLASSES = ("decode", "prefill", "small")


def parse_shapes(path):
    """(M, N, K, layout) of every fp32 line of a shapes file (``MxNxK[:dtype[:layout]]  # note``)."""
    out = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].strip()
            if not text:
                continue
            parts = text.split(":")
            try:
                m, n, k = (int(v) for v in parts[0].lower().split("x"))
            except ValueError:
                raise SystemExit("%s:%d: not a shape MxNxK[:dtype[:layout]]: %s" % (path, number, text))
            dtype = parts[1] if len(parts) > 1 else "fp32"
            layout = parts[2].upper() if len(parts) > 2 else "NN"
            if dtype == "fp32":
                out.append((m, n, k, layout))
    return out


def shape_id(m, n, k, layout, dtype="fp32"):
    return "%dx%dx%d_%s_%s" % (m, n, k, dtype, layout)


def write_shapes(shapes, dtype, path):
    """The shapes as a shapes file of ``dtype`` (the tune's input for --dtype bf16)."""
    with open(path, "w") as f:
        f.write("".join("%dx%dx%d:%s:%s\n" % (m, n, k, dtype, layout) for m, n, k, layout in shapes))
    return path


def shape_class(m, n, k):
    if m <= 16 and 512 <= n <= 8192 and 512 <= k <= 8192:
        return "decode"
    if max(m, n, k) <= 384:
        return "small"
    if 32 <= m <= 256:
        return "prefill"
    return "other"


def run_tune(shapes_file, workdir, extra):
    """``harness tune matmul --target local --library`` on the shapes in ``workdir``; its results."""
    os.makedirs(workdir, exist_ok=True)
    if not os.path.exists(os.path.join(workdir, "targets.yaml")):
        shutil.copy(os.path.join(ROOT, "targets.yaml"), workdir)
    cmd = [sys.executable, "-m", "harness", "tune", "matmul", "--target", "local", "--library",
           "--shapes-file", os.path.abspath(shapes_file)] + list(extra)
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)  # the tune's own processes are the harness's business
    print("$ %s   (in %s)" % (" ".join(cmd[1:]), workdir), flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, bufsize=1)
    for line in proc.stdout:  # the tune's progress as it goes (a default tune takes many minutes here)
        if line.strip():
            print("  | " + line.rstrip("\n").split("\r")[-1], flush=True)
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit("the tune exited %d" % proc.returncode)
    print("tune: %.0f s" % (time.monotonic() - start))
    return os.path.join(workdir, "results", "local", "matmul", "results.csv")


def read_results(path, dtype="fp32"):
    """shape id -> {"tuned": ns, "library": ns, "build": str, "cpu": str} from a results CSV."""
    import csv

    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("status") != "ok" or row.get("dtype") != dtype:
                continue
            try:
                t = float(row.get("time_ns") or row.get("time_ns_median"))
            except (TypeError, ValueError):
                continue
            entry = out.setdefault(row["shape_id"], {})
            if row["variant_id"].startswith("lib:"):
                if t < entry.get("library", math.inf):
                    entry.update(library=t, build=row.get("library") or row["variant_id"],
                                 cpu=row.get("pinned_cpu") or "")
            elif t < entry.get("tuned", math.inf):
                entry["tuned"] = t
    return out


def pin(cpus):
    """Pin this process to the cores the library row ran on (else the last core)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
        want = [int(c) for c in str(cpus).split(",") if c.strip()] or allowed[-1:]
        os.sched_setaffinity(0, want)
        return ",".join(map(str, want))
    except (AttributeError, OSError, ValueError):
        return "not pinned"


def operands(m, n, k, layout):
    """A (M x K) and B (K x N) as numpy views of arrays stored as the layout says; C preallocated."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m), dtype=np.float32).T if layout[0] == "T" else \
        rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k), dtype=np.float32).T if layout[1] == "T" else \
        rng.standard_normal((k, n), dtype=np.float32)
    return a, b, np.empty((m, n), dtype=np.float32)


def switches():
    """Involuntary context switches of this process so far."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


class LibraryProgram(object):
    """The library row's program of a tune's bundle, started for one shape as the agent starts it
    (remote_agent/runners/elf.py builds its command line); its answer is checked by its main, then
    it times as many calls as it is asked for, one sample at a time."""

    def __init__(self, bundle, manifest, variant, shape, grid):
        from remote_agent.runners.elf import ElfRunner

        argv = ElfRunner(bundle, manifest, profiler=None, pin_cpu="none").command(variant, shape, grid, 0, 1)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=bundle,
                                     universal_newlines=True, bufsize=1)
        self.check, self.library = None, ""
        for line in self.proc.stdout:
            if line.startswith("HARNESS_LIBRARY "):
                self.library = line.split(" ", 1)[1].strip()
            if line.startswith("HARNESS_RESULT "):
                import json

                self.check = json.loads(line.split(" ", 1)[1])
                break
        if self.check is None:
            self.close()
            raise RuntimeError("the library program gave no result line")

    def sample(self, calls):
        """(ns for ``calls`` back-to-back calls, involuntary context switches meanwhile)."""
        self.proc.stdin.write("%d\n" % calls)
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("HARNESS_SAMPLE "):
                ns, sw = line.split()[1:3]
                return float(ns), int(sw)
        raise RuntimeError("the library program ended")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


def numpy_sample(a, b, c, calls):
    """(ns for ``calls`` calls of ``np.matmul(a, b, out=c)``, involuntary context switches meanwhile)."""
    n0, s = switches(), time.perf_counter()
    for _ in range(calls):
        np.matmul(a, b, out=c)
    return (time.perf_counter() - s) * 1e9, switches() - n0


def batch(one_ns):
    """Calls per sample: a sample lasts at least 0.1 ms."""
    return max(1, int(1e5 / max(one_ns, 100.0)))


def measure(a, b, c, seconds, library=None):
    """Minimum per-call ns of numpy (and of ``library``, a LibraryProgram, sampled in turn with it),
    over samples of at least 0.1 ms, for at least ``seconds``. As the harness's agent does, a
    sample during which the OS switched the process out is set aside (it timed another process
    too); sampling goes on until 5 undisturbed samples of each are in, for at most 20 times
    ``seconds``; where none is, the minimum of all. Returns (numpy ns, library ns or None)."""
    takers = {"numpy": lambda n: numpy_sample(a, b, c, n)}
    if library is not None:
        takers["library"] = library.sample
    calls = {}
    for name, take in takers.items():
        take(1)
        calls[name] = batch(take(1)[0])
        take(calls[name])  # warm-up
    clean = {name: [] for name in takers}
    disturbed = {name: [] for name in takers}
    start = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        if (elapsed >= seconds and all(len(v) >= 5 for v in clean.values())) or elapsed >= 20 * seconds:
            break
        for name, take in takers.items():
            ns, sw = take(calls[name])
            (disturbed if sw else clean)[name].append(ns / calls[name])
    best = {name: min(clean[name] or disturbed[name]) for name in takers}
    return best["numpy"], best.get("library")


def numpy_ns(a, b, c, seconds):
    return measure(a, b, c, seconds)[0]


def load_bundle(path):
    """(bundle folder, manifest dict) of a tune, or (None, None) where it is not there."""
    import json

    manifest = os.path.join(path, "manifest.json") if path else ""
    if not os.path.isfile(manifest):
        return None, None
    with open(manifest) as f:
        return path, json.load(f)


def library_program(bundle, manifest, sid):
    """The library row's program for shape ``sid`` of the tune's bundle, or None."""
    if manifest is None:
        return None
    variants = {v["id"]: v for v in manifest["variants"]}
    shapes = {s["id"]: s for s in manifest["shapes"]}
    for job in manifest["jobs"]:
        v = variants.get(job["variant"])
        if job["shape"] == sid and v and v["id"].startswith("lib:") and v.get("artifact"):
            return LibraryProgram(bundle, manifest, v, shapes[sid], job["grid"])
    return None


def numpy_blas():
    """numpy's BLAS as threadpoolctl sees it: 'OpenBLAS 0.3.31, core SkylakeX, 1 thread'."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (pip install threadpoolctl)"
    for info in threadpool_info():
        if info.get("user_api") == "blas":
            return "%s %s, core %s, %s thread(s)" % (
                {"openblas": "OpenBLAS"}.get(info.get("internal_api"), info.get("internal_api")),
                info.get("version"), info.get("architecture"), info.get("num_threads"))
    return "no BLAS found"


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def gflops(m, n, k, ns):
    return 2.0 * m * n * k / ns if ns else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes-file", default=DEFAULT_SHAPES)
    p.add_argument("--results", help="a results CSV of a tune with --library on these shapes (no tune is run)")
    p.add_argument("--workdir", help="project folder of the tune (default: a fresh temporary one)")
    p.add_argument("--bundle", help="the tune's bundle (default: build/<target>/matmul beside the results' folder)")
    p.add_argument("--seconds", type=float, default=0.5, help="numpy: sample each shape at least this long")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"),
                   help="tune the file's fp32 shapes in this dtype (bf16: numpy still runs fp32, for scale)")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="more harness tune arguments (after --)")
    args = p.parse_args()
    if not os.path.isfile(args.shapes_file):
        raise SystemExit("%s: no such shapes file" % args.shapes_file)
    shapes = parse_shapes(args.shapes_file)
    if not shapes:
        raise SystemExit("%s: no fp32 shapes" % args.shapes_file)
    if args.results:
        if not os.path.isfile(args.results):
            raise SystemExit("%s: no such results file" % args.results)
        results_path = args.results
    else:
        workdir = args.workdir or tempfile.mkdtemp(prefix="cpu-vs-library-")
        tune_file = args.shapes_file
        if args.dtype != "fp32":
            os.makedirs(workdir, exist_ok=True)
            tune_file = write_shapes(shapes, args.dtype, os.path.join(workdir, "shapes_%s.txt" % args.dtype))
        results_path = run_tune(tune_file, workdir, [a for a in args.extra if a != "--"])
    results = read_results(results_path, args.dtype)
    parts = os.path.abspath(results_path).split(os.sep)  # .../results/<target>/<kernel>/results.csv
    bundle, manifest = load_bundle(args.bundle or os.sep.join(parts[:-4] + ["build"] + parts[-3:-1]))
    if manifest is None:
        print("no bundle beside the results (--bundle): library/numpy compares the tune's library time")
    cpus = next((r["cpu"] for r in results.values() if r.get("cpu")), "")
    pinned = pin(cpus)
    if CORETYPE_SET_ASIDE:
        print("OPENBLAS_CORETYPE=%s in the environment set aside: OpenBLAS picks the kernels for this CPU"
              % CORETYPE_SET_ASIDE)
    print("numpy %s: %s; pinned to core %s" % (np.__version__, numpy_blas(), pinned))
    print("numpy call overhead (1x1x1): %.2f us" % (numpy_ns(*operands(1, 1, 1, "NN"), 0.1) / 1e3))
    if args.dtype != "fp32":
        print("%s: tuned and library rows in %s (library: %s); numpy in fp32 (it has no %s GEMM), for scale" % (
            args.dtype, args.dtype, next((r["build"] for r in results.values() if r.get("build")), "none"),
            args.dtype))
    header = "%-20s %-8s %8s %8s %8s %8s %8s %9s  %s" % (
        "shape", "class", "tuned", "library", "lib now", "numpy", "lib/np", "tuned/lib", "library build")
    print("GFLOP/s; tuned, library: the tune's rows; lib now, numpy: measured interleaved here, lib/np of these")
    print(header)
    rows = []
    for m, n, k, layout in shapes:
        sid = shape_id(m, n, k, layout, args.dtype)
        r = results.get(sid, {})
        program = library_program(bundle, manifest, sid)
        try:
            np_ns, lib_ns = measure(*operands(m, n, k, layout), args.seconds, program)
        finally:
            if program is not None:
                program.close()
        row = {"shape": sid, "class": shape_class(m, n, k), "tuned": gflops(m, n, k, r.get("tuned")),
               "library": gflops(m, n, k, r.get("library")), "numpy": gflops(m, n, k, np_ns),
               "lib_now": gflops(m, n, k, lib_ns) if lib_ns else float("nan"),
               "build": (program.library if program is not None and program.library else
                         r.get("build", "no library row"))}
        row["lib_np"] = (row["lib_now"] if lib_ns else row["library"]) / row["numpy"]
        row["tuned_lib"] = row["tuned"] / row["library"]
        rows.append(row)
        print("%-20s %-8s %8.1f %8.1f %8.1f %8.1f %7.2fx %8.2fx  %s" % (
            sid, row["class"], row["tuned"], row["library"], row["lib_now"], row["numpy"], row["lib_np"],
            row["tuned_lib"], row["build"]), flush=True)
    for cls in CLASSES + ("other",):
        sub = [r for r in rows if r["class"] == cls]
        if sub:
            print("%-8s %2d shapes: geomean library/numpy %.3fx, tuned/library %.3fx" % (
                cls, len(sub), geomean(r["lib_np"] for r in sub), geomean(r["tuned_lib"] for r in sub)))
    measured = [r for r in rows if r["lib_np"] == r["lib_np"]]
    tuned = [r for r in rows if r["tuned_lib"] == r["tuned_lib"]]
    worst_np = min(measured, key=lambda r: r["lib_np"]) if measured else None
    worst_t = min(tuned, key=lambda r: r["tuned_lib"]) if tuned else None
    print("geomean over %d shapes: tuned/library %.3fx (worst %s %.3fx), library/numpy %.3fx (worst %s %.3fx)" % (
        len(rows), geomean(r["tuned_lib"] for r in tuned), worst_t["shape"] if worst_t else "-",
        worst_t["tuned_lib"] if worst_t else float("nan"), geomean(r["lib_np"] for r in measured),
        worst_np["shape"] if worst_np else "-", worst_np["lib_np"] if worst_np else float("nan")))


if __name__ == "__main__":
    main()
