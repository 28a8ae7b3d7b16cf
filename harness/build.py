"""harness build: space -> prune -> parallel compile -> test data -> manifest."""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from remote_agent.contract import DTYPE_BYTES

from . import state, ui
from .compile import cache
from .errors import HarnessError
from .limits import check_shapes
from .bundle import (FailedPair, Job, Manifest, PrunedEntry, ShapeEntry, Variant, bundle_dir, sha256_file,
                     write_data_file)
from .space import config_id, expand, first_pruning_rule


@dataclass
class BuildOptions:
    jobs: int = 0  # 0: all cores
    compile_timeout: float = 120.0
    seed: int = 0
    space: Optional[dict] = None  # overrides the kernel's space
    frontend: str = "auto"  # cpu: cpp or triton-cpu; gpu: triton
    from_ir: Optional[str] = None  # triton-cpu: import IR directories made elsewhere
    only_configs: Optional[list] = None  # build exactly these configs, for every shape
    only_pairs: Optional[list] = None  # build exactly these (config, shape id) pairs (a search's round)
    progress: bool = True  # the compile bar (off for rounds built while others are)
    # dtypes the GPU support kernels (fill, error, reference) cover besides the build's own shapes':
    # a tune's rounds give every shape's, since a GPU worker kept across rounds reads the support
    # kernels of the one manifest it started with
    support_dtypes: tuple = ()


@dataclass
class BuildSummary:
    bundle: Path
    manifest: Manifest
    compiled: int = 0
    cached: int = 0  # already built: in this bundle, or reused from the compile cache
    reused: int = 0  # of all variants: taken from the compile cache kept across projects
    failed: int = 0
    pruned_pairs: int = 0
    reused_across_shapes: int = 0
    seconds: float = 0.0
    statuses: dict = field(default_factory=dict)


def compiler_for(kernel, target, out_dir: Path, frontend: str = "auto", from_ir=None, jobs: int = 0):
    """The toolchain module that builds this kernel for this target."""
    if frontend not in ("auto", "cpp", "triton", "triton-cpu"):
        raise HarnessError("--frontend %s: choose cpp or triton-cpu (CPU targets), triton (GPU targets)" % frontend)
    if frontend == "triton-cpu" or from_ir:
        from .compile.triton_cpu import TritonCpuCompiler

        return TritonCpuCompiler(kernel, target, out_dir, from_ir=from_ir, jobs=jobs)
    if target.is_gpu:
        from .compile.triton_gpu import TritonGpuCompiler

        return TritonGpuCompiler(kernel, target, out_dir)
    if kernel.cpu_template is None:
        raise HarnessError("kernel %s has no CPU source: build it for a GPU target (backend cuda or hip)"
                           % kernel.name)
    from .compile.cpp import CppCompiler

    return CppCompiler(kernel, target, out_dir)


def plan(kernel, target, shapes, space, compiler):
    """Decide which (config, specialization) variants to build and which pairs are pruned.

    Returns (variants: {variant_id: (config, representative shape, spec)},
             jobs: [(variant_id, shape)], pruned: [PrunedEntry]).
    """
    rules = kernel.rules_for(target)
    variants, jobs, pruned = {}, [], []
    for config in expand(space):
        for shape in shapes:
            spec = compiler.specialization(config, shape)
            vid = config_id(config, salt=repr(spec))
            rule = first_pruning_rule(rules, config, shape, target)
            if rule is None:
                rule = compiler.resource_rule(config, shape)
            if rule is not None:
                pruned.append(PrunedEntry(vid, config, shape.id, rule.name, rule.why))
                continue
            variants.setdefault(vid, (config, shape, spec))
            jobs.append((vid, shape))
    return variants, jobs, pruned


def plan_pairs(kernel, target, pairs, compiler):
    """``plan`` for exactly the (config, [shapes]) ``pairs``: each config is built for the
    specializations of its own shapes only (a config one shape asked for is not compiled for the
    others' specializations)."""
    variants, jobs, pruned = {}, [], []
    for cfg, cfg_shapes in pairs:
        v, j, p = plan(kernel, target, cfg_shapes, {k: [val] for k, val in cfg.items()}, compiler)
        variants.update(v)
        jobs += j
        pruned += p
    return variants, jobs, pruned


def _wanted_pairs(options: BuildOptions, shapes, fixed_configs) -> Optional[list]:
    """The (config, [shapes]) pairs a build is limited to: ``only_pairs``, else ``only_configs``
    (or the configs imported IR fixes) for every shape; None: the whole space."""
    if options.only_pairs is not None:
        by_id = {s.id: s for s in shapes}
        return [(cfg, [by_id[sid]]) for cfg, sid in options.only_pairs]
    configs = options.only_configs if options.only_configs is not None else fixed_configs
    return None if configs is None else [(cfg, shapes) for cfg in configs]


def build(kernel, target, shapes, root: Path, options: BuildOptions) -> BuildSummary:
    """Build and save the bundle (manifest.json, the target's state)."""
    summary = compile_bundle(kernel, target, shapes, root, options)
    save_bundle(summary.manifest, root, target)
    return summary


_bundle_lock = threading.Lock()  # builds of overlapping rounds write one manifest.json and state file


def save_bundle(manifest: Manifest, root: Path, target) -> None:
    """Write the bundle's manifest.json and record it in the target's state (one build at a time)."""
    out = bundle_dir(root, target.name, manifest.kernel)
    with _bundle_lock:
        manifest.save(out)
        state.record(root, target.name, kernel=manifest.kernel, bundle=str(out.relative_to(root)))


def compile_bundle(kernel, target, shapes, root: Path, options: BuildOptions) -> BuildSummary:
    """Plan, compile and describe the bundle; the manifest is returned, not saved. Several may
    run at once (rounds built while others are): they share the compile pool, and a variant two
    of them want is compiled once."""
    import time

    start = time.monotonic()
    out = bundle_dir(root, target.name, kernel.name)
    out.mkdir(parents=True, exist_ok=True)
    check_shapes(kernel, target, shapes)  # dimensions and test data memory, before any compile
    compiler = compiler_for(kernel, target, out, options.frontend, options.from_ir, options.jobs)
    support = None
    if options.support_dtypes and hasattr(compiler, "expect_dtypes"):
        compiler.expect_dtypes(options.support_dtypes)
        # the support kernels (known now) compile beside the variants: a tune's first round waits for both
        support = threading.Thread(target=_quietly, args=(compiler.describe,), daemon=True, name="support")
        support.start()
    space = options.space or kernel.space_for(target)
    wanted = _wanted_pairs(options, shapes, getattr(compiler, "fixed_configs", None))
    if wanted is None:
        variants, jobs, pruned = plan(kernel, target, shapes, space, compiler)
        config_names = list(space)
    else:
        variants, jobs, pruned = plan_pairs(kernel, target, wanted, compiler)
        config_names = list(dict.fromkeys(k for cfg, _ in wanted for k in cfg))

    mine = set()  # the variants this build compiled or reused (not those another build was at)
    results = compile_all(compiler, variants, options, mine)
    if support is not None:
        support.join()  # (a support kernel that failed fails again below, where its error is raised)
    summary = BuildSummary(out, None, pruned_pairs=len(pruned))
    manifest_variants = []
    for vid, (config, shape, spec) in variants.items():
        res = results[vid]
        summary.reused += res.reused and vid in mine
        if res.status == "ok":
            fresh = not res.cached and vid in mine
            summary.cached += not fresh
            summary.compiled += fresh
        else:
            summary.failed += 1
        rel = str(res.artifact.relative_to(out)) if res.artifact else None
        manifest_variants.append(Variant(
            id=vid, config=config, dtype=shape.dtype, specialization=list(spec), status=res.status,
            artifact=rel, sha256=sha256_file(res.artifact) if res.artifact else None,
            message=res.message, launch=res.launch, compile_seconds=round(res.seconds, 3)))
    summary.reused_across_shapes = len(jobs) - len(variants)
    # the configs each shape took: a later tune of these shapes searches them first (Problem.prefer)
    cache.note_built(kernel.name, target, [(shape.id, variants[vid][0]) for vid, shape in jobs
                                           if results[vid].status != "compile_timeout"])
    manifest_shapes = write_test_data(kernel, target, shapes, out, options.seed)
    summary.manifest = Manifest(
        kernel=kernel.name,
        target=target_facts(target),
        toolchain=compiler.describe(),
        variants=manifest_variants,
        shapes=manifest_shapes,
        jobs=[Job(vid, shape.id, list(kernel.grid(variants[vid][0], shape, target))) for vid, shape in jobs
              if results[vid].status == "ok"],  # failed compiles are rows of their own, not jobs
        failed=[FailedPair(vid, shape.id) for vid, shape in jobs if results[vid].status != "ok"],
        pruned=pruned,
        seed=options.seed,
        config_names=config_names,
        tolerances=kernel.tolerances,
        checks=kernel.describe_checks(),
        device_reference=kernel.device_reference,
        device_plugin=copy_device_plugin(kernel, out) if target.is_gpu else {},
        data_on_device=target.is_gpu,
    )
    summary.seconds = time.monotonic() - start
    for v in manifest_variants:
        summary.statuses[v.status] = summary.statuses.get(v.status, 0) + 1
    return summary


def copy_device_plugin(kernel, out: Path) -> dict:
    """The kernel's device plug-in copied into the bundle under its content hash, as the
    manifest's ``device_plugin`` records it ({} for a kernel without one)."""
    if kernel.device_plugin is None:
        return {}
    source = Path(kernel.device_plugin).read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    rel = "device/%s-%s" % (digest[:16], Path(kernel.device_plugin).name)
    dest = out / rel
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        # a name of this writer's own: rounds of one tune build bundles concurrently
        tmp = dest.with_name("%s.%d.%d.tmp" % (dest.name, os.getpid(), threading.get_ident()))
        tmp.write_bytes(source)
        tmp.replace(dest)
    return {"file": rel, "sha256": digest}


_pool_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None
_pool_size = 0
_compiling: dict = {}  # (bundle folder, variant id) -> Future of the compile in progress


def compile_pool(jobs: int) -> ThreadPoolExecutor:
    """The process's compile threads, shared by every build (overlapping rounds queue their
    compiles in the order they asked, so an older round finishes first)."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size != jobs:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool, _pool_size = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="compile"), jobs
        return _pool


def _quietly(call) -> None:
    try:
        call()
    except Exception:  # raised again where the caller calls it itself
        pass


def compile_all(compiler, variants: dict, options: BuildOptions, mine: Optional[set] = None) -> dict:
    """Compile every variant in the shared pool with a rich progress bar; failures are results.
    A variant another build is compiling right now is waited for, not compiled twice (``mine``
    gets the ids of the variants this call started)."""
    pool = compile_pool(options.jobs or os.cpu_count() or 1)
    futures, started = {}, []
    compiled = getattr(compiler, "compiled", None)  # a result the bundle holds: no wait behind the queue
    ready = {vid: compiled(cfg, shape) for vid, (cfg, shape, _) in variants.items()} if compiled else {}
    with _pool_lock:
        for vid, (cfg, shape, spec) in variants.items():
            key = (str(compiler.out_dir), vid)
            future = _compiling.get(key)
            done = ready.get(vid) if future is None else None
            if done is not None:
                future = Future()
                future.set_result(done)
            elif future is None:
                future = _compiling[key] = pool.submit(compiler.compile, cfg, shape, options.compile_timeout)
                started.append((key, future))
                if mine is not None:
                    mine.add(vid)
            futures[future] = vid
    # outside the lock: a compile already done (a cached artifact) runs its callback right here,
    # and the callback takes the lock
    for key, future in started:
        future.add_done_callback(lambda f, key=key: _forget(key, f))
    if not options.progress:
        return {vid: future.result() for future, vid in futures.items()}
    results = {}
    with ui.progress() as bar:
        task = bar.add_task("compile", total=len(variants), info="")
        failed = 0
        for future in as_completed(futures):
            res = future.result()
            results[futures[future]] = res
            failed += res.status != "ok"
            bar.update(task, advance=1, info="%d failed" % failed if failed else "")
    return results


def cancel_compiles(out: Path) -> None:
    """Cancel the compiles for bundle folder ``out`` queued and not started (their builds raise
    CancelledError)."""
    with _pool_lock:
        futures = [f for (folder, _), f in _compiling.items() if folder == str(out)]
    for future in futures:
        future.cancel()


def _forget(key, future: Future) -> None:
    with _pool_lock:
        if _compiling.get(key) is future:
            del _compiling[key]


def write_test_data(kernel, target, shapes, out: Path, seed: int) -> list:
    """Each shape's entry (dims, operands as the kernel declares them, scalars) and its seeded
    inputs and references, content-addressed; GPU bundles generate inputs on device."""
    entries = []
    for shape in shapes:
        operands = [op.describe(shape) for op in kernel.operands]
        entry = ShapeEntry(id=shape.id, dims=shape.dim_values, dtype=shape.dtype, layout=shape.layout,
                           weight=shape.weight, flops=kernel.flops(shape), bytes=kernel.bytes_moved(shape),
                           operands=operands, scalars=kernel.scalars(shape), extra=dict(shape.extra))
        if not target.is_gpu:
            arrays = kernel.make_data(shape, seed)
            for op in operands:
                if op["role"] == "output":
                    continue
                array = _declared_array(kernel, shape, op, arrays)
                entry.data[op["name"]], entry.sha256[op["name"]] = write_data_file(out, array)
        entries.append(entry)
    return entries


def _declared_array(kernel, shape, op: dict, arrays: dict):
    """The array make_data gave for operand ``op``, checked against the declaration: a kernel
    whose data and declaration disagree would make every answer look wrong on the board."""
    if op["name"] not in arrays:
        raise HarnessError("kernel %s: make_data gave no %r for shape %s (it gave %s)" % (
            kernel.name, op["name"], shape.id, ", ".join(sorted(arrays)) or "nothing"))
    array = arrays[op["name"]]
    if array.nbytes != op["bytes"] or array.itemsize != DTYPE_BYTES[op["dtype"]]:
        raise HarnessError("kernel %s: make_data's %r for shape %s has %d bytes of %d-byte elements; its "
                           "declaration says %d %s elements (%d bytes)" % (
                               kernel.name, op["name"], shape.id, array.nbytes, array.itemsize, op["elements"],
                               op["dtype"], op["bytes"]))
    return array


def target_facts(target) -> dict:
    return {
        "name": target.name, "arch": target.resolved_arch, "backend": target.backend,
        "march": target.march, "vlen": target.vlen, "threads": target.threads,
        "gpu_arch": target.gpu_arch, "profiler": target.profiler, "events": list(target.events),
        "run_under": target.run_under,
    }
