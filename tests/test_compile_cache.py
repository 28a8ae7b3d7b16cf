"""The compile cache kept across projects and tunes (harness.compile.cache): a second project
building the same configs compiles nothing and says how many it reused; a changed toolchain or
option misses. Real compiles: g++ for the C++ path, Triton's sm90 AOT compile (no GPU needed).
"""

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from harness.compile import cache
from tests.conftest import ANSWERS_ONLY, Workspace

REPO = Path(__file__).resolve().parent.parent
TARGET = "native-qemu-free"
TWO = "MR: [1, 2]\nNR: [16]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1]\n"


def tune(ws: Workspace, *extra):
    return ws.harness("tune", "matmul", "--target", TARGET, "--space", "space.yaml", "--shapes", "32x16x32",
                      "--strategy", "exhaustive", "--budget", "2", "--iters", "2", "--warmup", "1", "--top", "0",
                      *ANSWERS_ONLY, *extra).stdout


def project(path: Path, cache_dir) -> Workspace:
    """A fresh project folder sharing the compile cache ``cache_dir``."""
    path.mkdir()
    ws = Workspace(path)
    ws.env["HARNESS_CACHE_DIR"] = str(cache_dir)
    (ws.path / "space.yaml").write_text(TWO)
    return ws


@pytest.mark.slow
def test_a_second_project_compiles_nothing_and_says_so(tmp_path):
    store = tmp_path / "store"
    first, second = project(tmp_path / "a", store), project(tmp_path / "b", store)
    out = tune(first)
    assert "compiles: 2 compiled, 0 reused from the compile cache (%s)" % (store / "compile") in out
    entries = sorted(p.name for p in (store / "compile").glob("*/*.elf"))
    assert len(entries) == 2
    out = tune(second)  # a fresh project: its build folder is empty, the cache is not
    assert "compiles: 0 compiled, 2 reused from the compile cache" in out
    bundle = second.path / "build" / TARGET / "matmul" / "artifacts"
    assert sorted(p.name for p in bundle.glob("*.elf")) == entries
    for name in entries:  # the very binaries, and they ran: each has its rows
        assert (bundle / name).read_bytes() == next((store / "compile").glob("*/" + name)).read_bytes()
    rows = (second.path / "results" / TARGET / "matmul" / "results.csv").read_text().splitlines()
    assert len(rows) == 3 and all(",ok," in r for r in rows[1:])
    # another compiler flag is another toolchain: nothing is reused
    third = project(tmp_path / "c", store)
    (third.path / "targets.yaml").write_text(third.targets_yaml().replace("profiler: wallclock\n",
                                                                          "profiler: wallclock\n  cflags: [-O2]\n"))
    assert "compiles: 2 compiled, 0 reused" in tune(third)
    # and the cache can be turned off
    fourth = project(tmp_path / "d", "off")
    assert "compiles: 2 compiled, 0 reused from the compile cache (off" in tune(fourth)


TWELVE = "MR: [1, 2, 4]\nNR: [16, 32]\nKC: [64]\nMC: [16]\nNC: [64]\nPACK_B: [1, 0]\n"


@pytest.mark.slow
def test_a_second_search_of_a_shape_asks_what_the_first_built_and_compiles_nothing(tmp_path):
    """The default genetic search is adaptive: a second tune whose seed (or measurements) differ
    would ask other configs. The cache records which configs each shape's builds took
    (built/<kernel>-<machine>.jsonl beside the artifacts), and a tune of that shape searches those
    first: the second project compiles nothing while its budget fits in what the first built."""
    store = tmp_path / "store"
    first, second = project(tmp_path / "a", store), project(tmp_path / "b", store)
    for ws in (first, second):
        (ws.path / "space.yaml").write_text(TWELVE)

    def search(ws, seed):
        return ws.harness("tune", "matmul", "--target", TARGET, "--space", "space.yaml", "--shapes", "32x16x32",
                          "--strategy", "genetic", "--budget", "4", "--seed", seed, "--no-warm-start", "--iters", "2",
                          "--warmup", "1", "--top", "0", *ANSWERS_ONLY).stdout

    out = search(first, "1")
    assert "compiles: 4 compiled, 0 reused" in out, out
    record = list((store / "built").glob("matmul-cpu-*.jsonl"))
    built = [json.loads(line) for line in record[0].read_text().splitlines()]
    assert len(record) == 1
    assert len(built) == 4 and {b["shape"] for b in built} == {"32x16x32_fp32_NN"}
    measured = lambda ws: {r["variant_id"] for r in csv.DictReader(  # noqa: E731
        open(ws.path / "results" / TARGET / "matmul" / "results.csv"))}
    out = search(second, "2")  # another seed: another random order, which starts with the four built
    assert "compiles: 0 compiled, 4 reused from the compile cache" in out, out
    assert measured(second) == measured(first)
    # with the record gone, the same second search asks others (it follows its own seed)
    (store / "built").rename(tmp_path / "gone")
    third = project(tmp_path / "c", store)
    (third.path / "space.yaml").write_text(TWELVE)
    assert "compiles: 0 compiled" not in search(third, "2")
    assert measured(third) != measured(first)


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    assert cache.cache_root() == tmp_path / "compile"
    monkeypatch.setenv("HARNESS_CACHE_DIR", "off")
    assert cache.cache_root() is None and cache.entry_path(tmp_path / "x.cubin") is None
    monkeypatch.delenv("HARNESS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "harness" / "compile"


@pytest.mark.slow
def test_gpu_compiles_reused_across_projects_and_missed_on_another_toolchain(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from harness.build import BuildOptions, build
    from harness.compile import triton_gpu
    from harness.compile.triton_gpu import TritonGpuCompiler
    from harness.kernels import get
    from harness.shapes import make_shape
    from harness.targets import load_targets

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "store"))
    config = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=1, num_stages=2)
    # two shapes of one specialization class: one compile serves both
    shapes = [make_shape(128, 128, 128, "fp16", "NN"), make_shape(256, 192, 64, "fp16", "NN")]
    target = load_targets(REPO / "targets.yaml")["gpu-node"]
    kernel = get("matmul")
    first = build(kernel, target, shapes, tmp_path / "a", BuildOptions(jobs=1, only_configs=[config]))
    assert (first.compiled, first.reused) == (1, 0) and len(first.manifest.jobs) == 2
    before = cache.counts()
    second = build(kernel, target, shapes, tmp_path / "b", BuildOptions(jobs=1, only_configs=[config]))
    assert (second.compiled, second.cached, second.reused) == (0, 1, 1)
    after = cache.counts()
    # the support kernels (fill, error, reference) came from the cache too: nothing compiled
    assert after["compiled"] == before["compiled"] and after["reused"] - before["reused"] >= 4
    a, b = (next(v for v in s.manifest.variants if v.status == "ok") for s in (first, second))
    assert a.artifact == b.artifact and a.sha256 == b.sha256 and a.launch == b.launch
    assert (tmp_path / "b" / "build" / "gpu-node" / "matmul" / b.artifact).exists()
    # another Triton, another GPU target: the digest differs, so the cache misses and compiles
    monkeypatch.setattr(triton_gpu, "triton_version", lambda: "3.9.0+other")
    other = TritonGpuCompiler(kernel, target, tmp_path / "c")
    res = other.compile(config, shapes[0], 120.0)
    assert res.status == "ok" and not res.cached and not res.reused
    monkeypatch.undo()
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "store"))
    sm80 = TritonGpuCompiler(kernel, dataclasses.replace(target, gpu_arch="80"), tmp_path / "d")
    res = sm80.compile(config, shapes[0], 120.0)
    assert res.status == "ok" and not res.cached and not res.reused
    # the same toolchain in yet another folder: reused
    again = TritonGpuCompiler(kernel, target, tmp_path / "e").compile(config, shapes[1], 120.0)
    assert again.reused and again.launch["entry"] == a.launch["entry"]


@pytest.mark.slow
def test_a_round_of_configs_the_bundle_holds_waits_for_no_place_in_the_compile_pool(tmp_path, monkeypatch):
    """A winners' re-measure builds rounds of configs compiled earlier in the tune while the pool
    is busy with the search's compiles: those come from the bundle at once."""
    pytest.importorskip("triton")
    import threading

    from harness import build as build_module
    from harness.build import BuildOptions, build
    from harness.kernels import get
    from harness.shapes import make_shape
    from harness.targets import load_targets

    monkeypatch.setenv("HARNESS_CACHE_DIR", "off")
    config = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, SPLIT_K=1, num_warps=1, num_stages=2)
    shapes = [make_shape(128, 128, 128, "fp16", "NN")]
    target, kernel = load_targets(REPO / "targets.yaml")["gpu-node"], get("matmul")
    first = build(kernel, target, shapes, tmp_path, BuildOptions(jobs=1, only_configs=[config]))
    assert first.compiled == 1
    release = threading.Event()
    blocker = build_module.compile_pool(1).submit(release.wait, 120)  # the pool's one place taken
    try:
        done = []
        thread = threading.Thread(target=lambda: done.append(
            build(kernel, target, shapes, tmp_path, BuildOptions(jobs=1, only_configs=[config]))))
        thread.start()
        thread.join(60)
        assert done and done[0].compiled == 0 and done[0].cached == 1  # built while the pool was full
        assert not blocker.done()
    finally:
        release.set()


HELPER = '''
import triton


@triton.jit
def bump(x):
    return x + %d
'''

KERNEL = '''
import triton
import triton.language as tl

from .helper import bump

ARGS = ["x_ptr"]
CONSTEXPRS = ["BLOCK"]


@triton.jit
def kern(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, bump(tl.load(x_ptr + offs)))
'''


def test_an_edit_of_a_helper_the_kernel_calls_from_another_module_makes_new_artifacts(tmp_path, monkeypatch):
    """The artifacts' digests start with the kernel's source hash: an edit of a JIT function it
    calls from another module (the block-scaled kernels' shared epilogue, say) must change it, or
    the compile cache would hand back artifacts built from the old helper."""
    pytest.importorskip("triton")
    import sys

    from harness.compile.triton_gpu import KernelSource

    pkg = tmp_path / "cachekern"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kern.py").write_text(KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))

    def source_hash(step):
        (pkg / "helper.py").write_text(HELPER % step)
        for name in ("cachekern.kern", "cachekern.helper", "cachekern"):
            sys.modules.pop(name, None)
        return KernelSource("cachekern.kern:kern").source_hash.hexdigest()

    assert source_hash(1) == source_hash(1)  # the same sources: the same key
    assert source_hash(1) != source_hash(2)
