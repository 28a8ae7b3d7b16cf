"""(host or node) The kept compile workers' start, with the zygote and without
(``HARNESS_COMPILE_ZYGOTE=0``): sm90 compiles of the matmul kernel through
``harness.compile.workers.run_job``, ``--workers`` at once on a fresh key (the first workers: the
zygote's import, or each worker's own), then twice as many at once (as many new workers: a fork
each, or an import each). Prints the seconds to each group's first and last answer.

    python3 -m bench.probes.compile_worker_start [--workers 3] [--repeats 3]
"""

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.compile import workers
from harness.compile.triton_gpu import TritonGpuCompiler, _compile_env
from harness.kernels import get
from harness.shapes import make_shape
from harness.targets import load_targets

ROOT = Path(__file__).resolve().parents[2]
CONFIG = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=1, num_stages=2)


def jobs(out: Path, count: int) -> list:
    compiler = TritonGpuCompiler(get("matmul"), load_targets(ROOT / "targets.yaml")["gpu-node"], out)
    shape = make_shape(128, 128, 128, "fp16", "NN")
    return [dict(compiler._job_for(CONFIG, shape), out=str(out / ("k%d" % i))) for i in range(count)]


def answers(batch: list, env: dict) -> list:
    """Seconds to each job's answer, all asked at once."""
    start = time.monotonic()

    def one(job):
        done = workers.run_job("harness.compile.triton_gpu", job, 300, env)
        assert done and done[1]["status"] == "ok", done
        return time.monotonic() - start

    with ThreadPoolExecutor(len(batch)) as pool:
        return sorted(pool.map(one, batch))


def once(zygote: bool, count: int, out: Path) -> tuple:
    """On a fresh worker key: the seconds to the answers of ``count`` jobs at once (the first
    workers), then of ``2 * count`` at once (``count`` of them kept, ``count`` new)."""
    os.environ["HARNESS_COMPILE_ZYGOTE"] = "1" if zygote else "0"
    env = dict(_compile_env(), PROBE_RUN=str(time.monotonic()))  # a key of its own: nothing kept
    batch = jobs(out, 2 * count)
    first = answers(batch[:count], env)
    later = answers(batch, env)
    workers.close_all()
    return first, later


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {True: [], False: []}
        for _ in range(args.repeats):
            for zygote in (True, False):
                rows[zygote].append(once(zygote, args.workers, Path(tmp)))
    for zygote in (True, False):
        print("zygote:" if zygote else "Popen (HARNESS_COMPILE_ZYGOTE=0):")
        for name, group in (("%d first workers" % args.workers, 0), ("%d jobs, %d of them on new workers"
                                                                       % (2 * args.workers, args.workers), 1)):
            times = [run[group] for run in rows[zygote]]
            print("  %-36s first answer %.2f s, last %.2f s (medians of %d)" % (
                name, statistics.median(t[0] for t in times), statistics.median(t[-1] for t in times), len(times)))


if __name__ == "__main__":
    main()
