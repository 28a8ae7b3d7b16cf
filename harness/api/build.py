"""build: space -> prune -> parallel compile -> bundle, for one kernel and target."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from rich.markup import escape

from .. import state, ui
from ..errors import HarnessError
from .common import ROOT, default_dtype, pick_build_target, require_triton, shapes_from_options


@dataclass
class BuildArgs:
    """The options of ``build``, as the command line's defaults have them."""

    kernel: str
    target: Optional[str] = None
    shapes: Optional[str] = None
    shapes_file: Optional[str] = None
    shapes_format: str = "auto"
    dtype: Optional[str] = None
    space: Optional[str] = None
    jobs: int = 0
    compile_timeout: float = 120.0
    seed: int = 0
    frontend: str = "auto"
    from_ir: Optional[str] = None
    thr: float = 0.1
    summary_csv: Optional[str] = None
    library: bool = False
    effort: Optional[str] = "default"  # quick, default, full (harness/effort.py); None: default
    targets_file: Optional[str] = None


# the options state records of a build (push builds a missing bundle with them: push.build_like_last)
RECORDED_OPTIONS = ("shapes", "shapes_file", "shapes_format", "dtype", "space", "jobs", "compile_timeout", "seed",
                    "frontend", "from_ir", "thr", "library", "effort")


def build(args: BuildArgs):
    """Generate the search space, prune it per shape, compile every variant in parallel and
    write the bundle (manifest, artifacts, test data) under build/TARGET/KERNEL.

    Without --target it builds for targets.yaml's `default: NAME`, else for `local`, and says
    which. A second build compiles only what changed (artifacts are content-addressed)."""
    from .. import kernels
    from ..build import BuildOptions, build as do_build

    args = dataclasses.replace(args)  # the caller's options stay as given
    from ..space import load_space_file

    options = {name: getattr(args, name) for name in RECORDED_OPTIONS}  # what a later build repeats
    tgt = pick_build_target(args.target, args.targets_file)
    kern = kernels.get(args.kernel)
    if tgt.is_gpu:
        require_triton(tgt)
    if args.from_ir and not args.shapes and not args.shapes_file:  # the shapes the IR was generated for, when it says
        from ..compile.ir_import import recorded_shapes

        args.shapes = ",".join(recorded_shapes(args.from_ir, kern.name)) or None
    shape_list = read_shapes(tgt, args.shapes, args.shapes_file, args.shapes_format, args.dtype, args.thr,
                             args.summary_csv, kern)
    space_dict = load_space_file(args.space, kern.space_for(tgt)) if args.space else None
    from .. import effort as efforts

    level = efforts.get(args.effort)
    only_pairs = None
    if not args.from_ir and level.strategy != "exhaustive":  # CPU boards too: the packed kernel's spaces are large
        only_pairs = budgeted_pairs(kern, tgt, shape_list, space_dict or kern.space_for(tgt),
                                    efforts.budget_for(level, tgt.is_gpu), args.seed, args.frontend)
    say_build_plan(kern, tgt, shape_list, space_dict or kern.space_for(tgt), only_pairs, level)
    summary = do_build(kern, tgt, shape_list, ROOT, BuildOptions(jobs=args.jobs, compile_timeout=args.compile_timeout,
                                                                 seed=args.seed, space=space_dict, frontend=args.frontend,
                                                                 from_ir=args.from_ir, only_pairs=only_pairs))
    if summary.compiled and summary.seconds > 5:
        efforts.record_rates(ROOT, tgt, compile_s=summary.seconds / summary.compiled)
    ui.out.print("built %s for %s: %d variants (%d compiled, %d cached%s, %d failed), %d shapes, %d jobs, "
                 "%d pruned pairs, in %.1fs -> %s" % (
                     kern.name, tgt.name, len(summary.manifest.variants), summary.compiled, summary.cached,
                     " (%d reused from the compile cache)" % summary.reused if summary.reused else "",
                     summary.failed, len(shape_list), len(summary.manifest.jobs), summary.pruned_pairs,
                     summary.seconds, summary.bundle))
    print_all_pruned(summary.manifest, kern, tgt)
    if args.library:
        add_library(kern, tgt, shape_list, summary, args.compile_timeout, args.frontend, args.from_ir)
    state.record_build(ROOT, tgt.name, kern.name, options)


def budgeted_pairs(kern, tgt, shape_list, space, budget, seed, frontend) -> Optional[list]:
    """(config, shape id) pairs of a build below --effort exhaustive: for each shape the warm
    start's configs (the kernel's for its shape class, the nearest tuned shapes' winners) and
    then configs drawn at random from its pruned space, ``budget`` in all: what the tune's first
    rounds would measure. None where the space is no bigger than the budget (every config)."""
    from pathlib import Path

    from ..build import compiler_for
    from ..bundle import bundle_dir
    from ..strategies import get_strategy
    from ..strategies.base import prepare_problems
    from ..strategies.driver import pruning_predicate
    from ..strategies.seeded import Seeded, read_tuned, warm_start

    size = 1
    for values in space.values():
        size *= len(values)
    if budget is None or size <= budget:
        return None
    compiler = compiler_for(kern, tgt, bundle_dir(ROOT, tgt.name, kern.name), frontend)
    rules = kern.rules_for(tgt)
    tuned = read_tuned(Path(ROOT) / "tuned" / tgt.name / ("%s.json" % kern.name))
    strategies = [Seeded(get_strategy("random", seed=seed, batch_size=budget), warm_start(kern, tgt, sh, tuned))
                  for sh in shape_list]
    predicates = [pruning_predicate(rules, [sh], tgt, compiler.resource_rule) for sh in shape_list]
    prepare_problems(strategies, space, predicates)
    pairs = []
    from ..strategies.base import Trial

    for sh, strategy, is_pruned in zip(shape_list, strategies, predicates):
        chosen = []  # asked as a search would be, each ask counting the earlier ones as pending
        while len(chosen) < budget:
            batch = strategy.next_batch([Trial(c, status="pending") for c in chosen], space, is_pruned,
                                        limit=budget - len(chosen), budget=budget)
            if not batch.configs:
                break
            chosen += batch.configs
        pairs += [(cfg, sh.id) for cfg in chosen]
    return pairs


COUNT_LIMIT = 200_000  # (config, shape) pairs a plan line prunes to count the compiles (about 0.1 ms each here)


def feasible_plan(kern, tgt, shape_list, space) -> Optional[tuple]:
    """(configs, jobs) that the kernel's rules leave of ``space`` for ``shape_list``: the compiles
    and measurements an every-config build and run make. None where the space times the shapes is
    over COUNT_LIMIT (counting would take a while)."""
    import itertools

    from ..space import first_pruning_rule

    names = list(space)
    size = 1
    for values in space.values():
        size *= len(values)
    if size * max(1, len(shape_list)) > COUNT_LIMIT:
        return None
    rules = kern.rules_for(tgt)
    configs, jobs = set(), 0
    for values in itertools.product(*space.values()):
        config = dict(zip(names, values))
        kept = sum(1 for shape in shape_list if first_pruning_rule(rules, config, shape, tgt) is None)
        if kept:
            configs.add(values)
            jobs += kept
    return len(configs), jobs


def say_build_plan(kern, tgt, shape_list, space, only_pairs, level) -> None:
    """One line before the compiles: how many, about how long (harness/effort.py's rates), and
    which effort chose them."""
    from .. import effort as efforts

    if only_pairs is not None:
        n = len({tuple(sorted(c.items())) for c, _ in only_pairs})
        what = "build (effort %s: %d seeded and sampled configs a shape at most; --effort exhaustive: the whole space)" % (
            level.name, efforts.budget_for(level, tgt.is_gpu))
    else:
        counted = feasible_plan(kern, tgt, shape_list, space)
        if counted is not None:
            n = counted[0]
            what = "build (every config the rules keep for these shapes)"
        else:
            n = 1
            for values in space.values():
                n *= len(values)
            what = "build (every config of the space; pruning drops some)"
    ui.out.print(efforts.plan_line(what, n, 0, 0, efforts.estimate(ROOT, tgt, compiles=n)))


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
    words = []
    for field in dataclasses.fields(BuildArgs):
        if field.name in options and options[field.name] != field.default:
            flag = "--" + field.name.replace("_", "-")
            words.append(flag if options[field.name] is True else "%s %s" % (flag, options[field.name]))
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
