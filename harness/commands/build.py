"""harness build."""

from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape

from .. import state, ui
from ..errors import HarnessError
from .common import ROOT, TargetsOpt, pick_build_target, default_dtype, require_triton, shapes_from_options


def build(
    kernel: str = typer.Argument(..., help="kernel to build, e.g. matmul"),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target name from targets.yaml (default: its `default: NAME`, else local)"),
    shapes: Optional[str] = typer.Option(None, "--shapes", envvar="HARNESS_SHAPES", help="comma-separated shapes as the kernel writes them; matmul: MxNxK[:dtype[:layout]], e.g. 64x64x64,256x256x128:fp16"),
    shapes_file: Optional[str] = typer.Option(None, "--shapes-file", help="a file of shapes (format detected)"),
    shapes_format: str = typer.Option("auto", "--shapes-format", help="format of --shapes-file (auto-detected)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="dtype for shapes that name none (fp32 on CPUs, fp16 on GPUs)"),
    space: Optional[str] = typer.Option(None, "--space", envvar="HARNESS_SPACE", help="YAML/JSON file of parameter -> values overriding the kernel's ranges"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="parallel compiles (default: all cores)"),
    compile_timeout: float = typer.Option(120.0, "--compile-timeout", help="seconds per compile before it counts as compile_timeout"),
    seed: int = typer.Option(0, "--seed", help="seed of the test data"),
    frontend: str = typer.Option("auto", "--frontend", help="cpu: cpp (default) or triton-cpu (needs Triton-CPU here, or --from-ir)"),
    from_ir: Optional[str] = typer.Option(None, "--from-ir", help="triton-cpu: import IR dumps made elsewhere (<kernel>/<kernel>_<BM>_<BN>_<BK>_<G>/ dirs)"),
    thr: float = typer.Option(0.1, "--thr", help="hipBLASLt logs: keep GEMMs with at least this percent of the workload's measured time x calls (hipBLASLt's rule, where the log has us: per line), else of its FLOPs x calls"),
    summary_csv: Optional[str] = typer.Option(None, "--summary", help="hipBLASLt logs: write the workload summary CSV (shape, group, calls, share) here"),
    library: bool = typer.Option(False, "--library", help="also measure the library to beat on every shape (CPU: the reference build lib:reference; GPU: torch.matmul on the node, lib:torch.matmul)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Generate the search space, prune it per shape, compile every variant in parallel and
    write the bundle (manifest, artifacts, test data) under build/TARGET/KERNEL.

    Without --target it builds for targets.yaml's `default: NAME`, else for `local`, and says
    which. A second build compiles only what changed (artifacts are content-addressed)."""
    from .. import kernels
    from ..build import BuildOptions, build as do_build
    from ..space import load_space_file

    options = dict(shapes=shapes, shapes_file=shapes_file, shapes_format=shapes_format, dtype=dtype, space=space,
                   jobs=jobs, compile_timeout=compile_timeout, seed=seed, frontend=frontend, from_ir=from_ir,
                   thr=thr, library=library)
    tgt = pick_build_target(target, targets_file)
    kern = kernels.get(kernel)
    if tgt.is_gpu:
        require_triton(tgt)
    if from_ir and not shapes and not shapes_file:  # the shapes the IR was generated for, when it says
        from ..compile.ir_import import recorded_shapes

        shapes = ",".join(recorded_shapes(from_ir, kern.name)) or None
    shape_list = read_shapes(tgt, shapes, shapes_file, shapes_format, dtype, thr, summary_csv, kern)
    space_dict = load_space_file(space, kern.space_for(tgt)) if space else None
    summary = do_build(kern, tgt, shape_list, ROOT, BuildOptions(jobs=jobs, compile_timeout=compile_timeout,
                                                                 seed=seed, space=space_dict, frontend=frontend,
                                                                 from_ir=from_ir))
    ui.out.print("built %s for %s: %d variants (%d compiled, %d cached, %d failed), %d shapes, %d jobs, "
                 "%d pruned pairs, in %.1fs -> %s" % (
                     kern.name, tgt.name, len(summary.manifest.variants), summary.compiled, summary.cached,
                     summary.failed, len(shape_list), len(summary.manifest.jobs), summary.pruned_pairs,
                     summary.seconds, summary.bundle))
    print_all_pruned(summary.manifest, kern, tgt)
    if library:
        add_library(kern, tgt, shape_list, summary, compile_timeout, frontend, from_ir)
    state.record_build(ROOT, tgt.name, kern.name, options)


def print_all_pruned(manifest, kern, tgt, only=None) -> None:
    """A line for each shape (of ``only``) that every config was pruned for: the rules, with
    counts, and the nearest change that would leave a config."""
    from ..explain import all_pruned_shapes, explain

    for shape_id in all_pruned_shapes(manifest):
        if only is not None and shape_id not in only:
            continue
        ui.out.print("[yellow]%s[/]" % escape(explain(manifest, kern, tgt, shape_id).line()), soft_wrap=True)


def options_text(options: dict) -> str:
    """The options of a build as they would be typed, those at their defaults left out."""
    import inspect

    words = []
    for name, p in inspect.signature(build).parameters.items():
        if name in options and options[name] != p.default.default:
            flag = p.default.param_decls[0]
            words.append(flag if options[name] is True else "%s %s" % (flag, options[name]))
    return " ".join(words)


def read_shapes(tgt, shapes, shapes_file, shapes_format, dtype, thr, summary_csv, kern) -> list:
    """The shapes of the options, as ``kern`` writes them; a hipBLASLt log is cut at ``thr``
    percent and summarised."""
    if not shapes_file:
        if summary_csv:
            raise HarnessError("--summary goes with --shapes-file LOG (a hipBLASLt log)")
        return shapes_from_options(tgt, shapes, shapes_file, shapes_format, dtype, kern)
    from pathlib import Path

    from ..shapes import sources

    fmt = shapes_format
    if fmt == "auto" and Path(shapes_file).is_file():
        try:
            fmt = sources.detect(Path(shapes_file).read_text(errors="replace"))
        except OSError:
            pass
    if summary_csv and fmt not in ("auto", "hipblaslt"):
        raise HarnessError("--summary writes a hipBLASLt log's workload summary; %s reads as %s" % (shapes_file, fmt))
    shape_list = sources.read(Path(shapes_file), shapes_format, default_dtype(tgt, kern, dtype),
                              thr=thr, summary_path=summary_csv, problem=kern.problem)
    shares = [dict(s.extra).get("share") for s in shape_list]
    if fmt == "hipblaslt" and all(isinstance(x, (int, float)) for x in shares):
        ui.out.print("%s: %d shapes kept at --thr %g %%, %.2f %% of the workload (the rule is named above)%s" % (
            shapes_file, len(shape_list), thr, sum(shares), "; summary in %s" % summary_csv if summary_csv else ""))
    return shape_list


def add_library(kern, tgt, shape_list, summary, compile_timeout, frontend, from_ir) -> list:
    """Add the library to beat to the bundle just built (its manifest is saved again)."""
    from ..library import add_library as add, reference_description

    added = add(kern, tgt, shape_list, summary.manifest, summary.bundle, compile_timeout=compile_timeout,
                frontend=frontend, from_ir=from_ir, say=ui.out.print)
    summary.manifest.save(summary.bundle)
    if tgt.is_gpu:
        ui.out.print("library: %s (cuBLAS/hipBLASLt through torch on the node, timed like the variants), "
                     "%d shapes" % (", ".join(added), len(shape_list)))
        return added
    failed = [v.id for v in summary.manifest.variants if v.id in added and v.status != "ok"]
    names = [reference_description(kern, tgt) if a.startswith("lib:reference") else a for a in added]
    ui.out.print("library: %s, %d jobs%s" % (", ".join(names),
                                             sum(1 for j in summary.manifest.jobs if j.variant in added),
                                             " (failed to build: %s)" % ", ".join(failed) if failed else ""))
    return added
