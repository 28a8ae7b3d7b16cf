"""report: fetch the results, pick the best config per shape, write tuned files and tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from remote_agent.contract import PRUNED

from .. import state, ui
from ..errors import HarnessError
from .common import ROOT, kernel_of, pick_target
from ..report.common import safe_frame  # CSV cells a spreadsheet would take for formulas

FORMATS = ("aiter", "aiter-blockscale", "triton", "yaml", "vllm", "sglang")


@dataclass
class ReportArgs:
    """The options of ``report``, as the command line's defaults have them."""

    target: Optional[str] = None
    kernel: Optional[str] = None
    no_fetch: bool = False
    formats: Optional[List[str]] = None
    all_candidates: bool = False
    sort: bool = False
    tag: Optional[str] = None
    out: Optional[str] = None
    html: bool = False
    weights: Optional[str] = None
    err_ratio: Optional[float] = None
    only_faster: bool = False
    threshold: float = 0.8
    merge: Optional[List[str]] = None
    force: bool = False
    compare_wo_tuning: Optional[str] = None
    library: bool = False
    iters: int = 10
    warmup: int = 2
    timeout: float = 60.0
    jobs: int = 0
    targets_file: Optional[str] = None


def report(args: ReportArgs):
    """Fetch remote results (one tar stream), pick the best config per shape from ok rows
    (differences within the measured spread are ties, broken by lower spread; a winner
    re-measured by `harness tune` is used where there is one), write tuned/TARGET/KERNEL.csv and
    .json (plus --format files) and print a table. Library rows (lib:...) give the uplift."""
    if args.merge:
        return _merge(args.merge, args.out, args.force)
    fmts = _formats(args.formats)
    if args.err_ratio is not None and not 0 <= args.err_ratio <= 1:
        raise HarnessError("--err-ratio is a share of output elements, 0 to 1 (got %g)" % args.err_ratio)
    tgt = pick_target(args.target, args.targets_file, "report", last="last_run")
    if args.compare_wo_tuning:
        return _compare(args.compare_wo_tuning, tgt, args.kernel, args.library, args.iters, args.warmup,
                        args.timeout, args.jobs, args.out)

    from ..report.aggregate import best_per_shape, load_results, status_counts
    from ..report.common import kernel_rows, library_rows
    from ..transport.fetch import fetch_target
    from ..report.table import best_table
    from ..report.tuned import write_tuned
    from ..remeasure import library_times, load_winners
    from ..run import local_results_path

    kern = kernel_of(tgt.name, args.kernel)
    local = local_results_path(ROOT, tgt.name, kern)
    _, facts = state.get(ROOT, tgt.name)
    fetched = tgt.is_remote and facts.get("results_remote", True) and not args.no_fetch
    if fetched:
        new = fetch_target(tgt, kern, local)
        ui.console.print("fetched %d new rows from %s" % (new, tgt.name))
    from ..bundle import bundle_dir
    from ..compile.disasm import with_vector_counts
    from ..report.results_reader import Known

    bundle = bundle_dir(ROOT, tgt.name, kern)
    df = load_results([local], known=Known.from_bundle(bundle),
                      say=lambda line: ui.out.print(line, markup=False, soft_wrap=True))
    best = best_per_shape(kernel_rows(df))
    winners_file = load_winners(local)
    winners = winners_file["shapes"]
    best = apply_winners(best, df, winners)
    df = with_library_times(df, library_times(local, winners_file))
    best = with_vector_counts(best, bundle)  # vector instructions, when counted
    meta, shape_objs = _meta_and_shapes(tgt, bundle, refresh=fetched or not tgt.is_remote, local=local)
    out_dir = Path(args.out) if args.out else ROOT / "tuned" / tgt.name
    if args.weights is None:
        shape_weights = {s.id: s.weight for s in shape_objs}
        weights_src = shape_weights if any(w != 1.0 for w in shape_weights.values()) else None
    else:
        weights_src = args.weights
    has_library = len(library_rows(df)) > 0
    ship = best
    if has_library or args.err_ratio is not None:
        from ..report.uplift import library_uplift

        table, _ = library_uplift(df, best, weights_src, args.err_ratio)
        if args.only_faster:
            kept = set(table.loc[table["kept"], "shape_id"])
            ship = best[best["shape_id"].isin(kept)].reset_index(drop=True)
            dropped = sorted(set(best["shape_id"]) - kept)
            if dropped:
                ui.out.print("[yellow]--only-faster leaves out %d shapes: %s[/]" % (len(dropped), ", ".join(dropped)))
    elif args.only_faster:
        ui.out.print("[yellow]--only-faster: no library rows in the results (build with --library); nothing left out[/]")
    everything = df.assign(arch=meta["arch"], device_name=meta["device"], cu_num=meta["cu_num"],
                           driver=meta["driver"], toolchain=meta["toolchain"], triton=meta["triton"])
    json_meta = dict(meta, target=tgt.name, devices=sorted(df["device"].astype(str).unique().tolist()),
                     hosts=sorted(df["host"].dropna().astype(str).unique().tolist()) if "host" in df.columns else [])
    csv_path, json_path = write_tuned(everything, ship, out_dir, kern, json_meta)
    written = [csv_path, json_path]
    ui.out.print(best_table(best, status_counts(df)))
    _print_winners(best, winners)
    missing = sorted(set(kernel_rows(df)["shape_id"]) - set(best["shape_id"]))
    if missing:
        ui.out.print("[yellow]no ok config for: %s[/]" % ", ".join(missing))
        for line in _why_no_ok(kernel_rows(df), missing):
            ui.out.print("[yellow]  %s[/]" % line)
        _explain_pruned(bundle, kern, tgt, missing)
    if ship.empty and not best.empty:
        ui.out.print("[yellow]no tuned entry is left to write to --format files[/]")
    else:
        written += _write_formats(fmts, df, ship, meta, out_dir, kern, shape_objs, args.all_candidates, args.sort, args.tag)
    if has_library:
        written.append(_uplift(df, best, out_dir, kern, weights_src, args.err_ratio))
    written += _counters(df, out_dir, kern, args.threshold)
    if args.html:
        from ..report.html import write_html
        from ..tune_timing import load as load_tune_timing

        written.append(write_html(df, best, meta, out_dir / ("%s.html" % kern), weights=weights_src,
                                  threshold=args.threshold, max_err_ratio=args.err_ratio,
                                  title="harness report: %s on %s" % (kern, tgt.name),
                                  tune=load_tune_timing(local)))
    ui.out.print("wrote %s" % ", ".join(str(p) for p in written))


def _why_no_ok(rows, missing) -> list:
    """One line per shape without an ok row: its most frequent failing status and message, so
    that a whole shape lost to one cause (a missing support kernel, a wrong reference) is seen."""
    lines = []
    for shape_id in missing:
        failed = rows[(rows["shape_id"] == shape_id) & (rows["status"] != PRUNED)]
        if failed.empty:
            continue
        commonest = (failed["status"].astype(str) + ": " + failed["message"].fillna("").astype(str)).value_counts()
        lines.append("%s: %d of %d rows %s" % (shape_id, commonest.iloc[0], len(failed),
                                               commonest.index[0].rstrip(": ")))
    return lines


def _explain_pruned(bundle: Path, kern: str, tgt, shape_ids) -> None:
    """For the shapes every config was pruned for: the rules, with counts, and what would help."""
    from .. import kernels
    from ..bundle import Manifest
    from .build import print_all_pruned

    if (bundle / "manifest.json").exists():
        print_all_pruned(Manifest.load(bundle / "manifest.json"), kernels.get(kern), tgt, only=shape_ids)


def _formats(formats) -> list:
    out = []
    for item in formats or []:
        for name in filter(None, (p.strip().lower() for p in item.split(","))):
            if name not in FORMATS:
                import difflib

                close = difflib.get_close_matches(name, FORMATS, n=1)
                raise HarnessError("unknown --format %r%s; choose from %s" % (
                    name, " (did you mean %r?)" % close[0] if close else "", ", ".join(FORMATS)))
            if name not in out:
                out.append(name)
    return out


def apply_winners(best, df, winners: dict):
    """Replace a shape's best row with its noise-aware winner (re-measured interleaved by
    `harness tune`): its deciding time (``time_ns``) and spread are those of the re-measure
    (winners.json ``median_ns``: the winner's deciding time over the repeats)."""
    import pandas as pd

    from remote_agent.contract import OK, TIME, deciding_time

    if not winners or best.empty:
        return best.assign(decided=None) if not best.empty else best
    rows = []
    for _, row in best.iterrows():
        w = winners.get(row["shape_id"])
        if w:
            match = df[(df["shape_id"] == row["shape_id"]) & (df["variant_id"] == w["variant_id"])
                       & (df["device"] == row["device"]) & (df["status"] == OK)]
            if len(match):
                new = match.iloc[-1].copy()
                new["tflops"] = float(new["tflops"]) * deciding_time(new) / float(w["median_ns"])
                new[TIME] = float(w["median_ns"])
                new["spread_ns"] = float(w["spread_ns"])
                new["tied_with"] = max(0, len(w.get("tied") or []) - 1)
                new["decided"] = w.get("decided")
                rows.append(new)
                continue
        row = row.copy()
        row["decided"] = None
        rows.append(row)
    return pd.DataFrame(rows).reset_index(drop=True)


def with_library_times(df, times: dict):
    """``df`` with each library row of a re-measured shape timed as its winner is: over the
    re-measure's rounds (``times``: remeasure.library_times), not by its latest round alone."""
    from remote_agent.contract import TIME

    if not times:
        return df
    df = df.copy()
    lib = df["variant_id"].astype(str).str.startswith("lib:")
    for sid, t in times.items():
        df.loc[lib & (df["shape_id"] == sid), TIME] = float(t)
    return df


def _print_winners(best, winners: dict) -> None:
    from ..report.table import winners_table

    table = winners_table(best, winners)
    if table is not None:
        ui.out.print(table)


def _meta_and_shapes(tgt, bundle: Path, refresh: bool, local: Path) -> tuple:
    """The Meta fields of every tuned file, and the manifest's shapes (weights, extra columns)."""
    import json

    from .. import kernels
    from ..bundle import Manifest
    from ..devinfo import device_facts, meta_for

    manifest = None
    if (bundle / "manifest.json").exists():
        try:
            manifest = Manifest.load(bundle / "manifest.json")
        except HarnessError:
            manifest = None
    facts = device_facts(ROOT, tgt, refresh=refresh)
    meta = meta_for(tgt, manifest.toolchain if manifest else None, facts)
    shapes = []
    if manifest:
        try:
            problem = kernels.get(manifest.kernel).problem
        except HarnessError:  # a kernel this checkout does not have: its shapes only name its rows
            problem = None
        for s in (manifest.shapes if problem else []):
            try:
                shapes.append(s.to_shape(problem))
            except HarnessError:
                continue
    if local.parent.exists():  # the results folder records where its rows were measured
        (local.parent / "meta.json").write_text(json.dumps(dict(meta, facts=facts), indent=1))
    return meta, shapes


def _write_formats(fmts, df, best, meta, out_dir: Path, kern: str, shapes, all_candidates, sort, tag) -> list:
    """Every --format file; a format that can write nothing says why in one line and the others
    are still written; then exit 2 names the formats that wrote nothing."""
    from ..report.pick import say_default

    written, failed = [], []
    if "aiter-blockscale" in fmts:
        say_default("--format aiter-blockscale: aiter's a8w8 blockscale CSV dispatches libtype ck/cktile only "
                    "(gemm_op_a8w8: 'Unsupported libtype triton'); a Triton kernel's configs go to aiter's Triton "
                    "JSON (GEMM-A8W8_BLOCKSCALE): writing --format triton instead")
        fmts = [f for f in fmts if f != "aiter-blockscale"] + ([] if "triton" in fmts else ["triton"])
    if "aiter" not in fmts and (all_candidates or sort):
        ui.out.print("[yellow]--all-candidates and --sort go with --format aiter[/]")
    for fmt in fmts:
        try:
            written += _write_format(fmt, df, best, meta, out_dir, kern, shapes, all_candidates, sort, tag)
        except HarnessError as exc:
            failed.append("--format %s: %s" % (fmt, exc))
    if failed:
        ui.out.print("wrote %s" % ", ".join(str(p) for p in written))
        raise HarnessError("; ".join(failed))
    return written


def _write_format(fmt, df, best, meta, out_dir: Path, kern: str, shapes, all_candidates, sort, tag) -> list:
    if fmt == "aiter":
        from ..report.aiter_csv import write_tuned_csv

        paths = write_tuned_csv(df, best, meta, out_dir / ("%s.aiter.csv" % kern),
                                all_path=out_dir / ("%s.aiter.all.csv" % kern) if all_candidates else None,
                                sort=sort, shapes=shapes)
        ui.out.print("aiter: libtype triton rows run aiter's Triton GEMM, whose configs come from its Triton JSON: "
                     "write --format triton too")
        return paths
    if fmt == "triton":
        from ..report.triton_json import write_triton_json

        paths = write_triton_json(df, best, meta, out_dir / "triton", tag)
        return ["%s (%d files)" % (out_dir / "triton", len(paths))]
    if fmt == "yaml":
        from ..report.tune_gemm_yaml import write_tuned_yaml

        return [write_tuned_yaml(df, best, meta, out_dir / ("%s.yaml" % kern))]
    from ..report.vllm_json import write_vllm_json

    paths = write_vllm_json(df, best, meta, out_dir / fmt, consumer=fmt)
    return ["%s (%d files)" % (out_dir / fmt, len(paths))]


def _uplift(df, best, out_dir: Path, kern: str, weights, err_ratio) -> Path:
    from rich.table import Table

    from ..report.table import _time
    from ..report.uplift import libraries_words, library_label, library_uplift, write_uplift

    path, summary = write_uplift(df, best, out_dir / ("%s.uplift.csv" % kern), weights, err_ratio)
    table, _ = library_uplift(df, best, weights, err_ratio)
    t = Table(title="against the library")
    for col in ("shape", "library", "library time", "tuned time", "speedup", "weight", "kept", "reason", "uses"):
        t.add_column(col, justify="left" if col in ("shape", "library", "reason", "uses") else "right")
    for _, r in table.iterrows():
        t.add_row(r["shape_id"], library_label(r["library"], r["library_build"]) or "-", _time(r["library_ns"]) if r["library_ns"] == r["library_ns"]
                  and r["library_ns"] is not None else "-",
                  _time(r["tuned_ns"]) if r["tuned_ns"] == r["tuned_ns"] and r["tuned_ns"] is not None else "-",
                  "%.2fx" % r["speedup"] if r["speedup"] == r["speedup"] and r["speedup"] is not None else "-",
                  "%g" % r["weight"], "yes" if r["kept"] else "no", r["reason"], r["uses"])
    ui.out.print(t)
    if summary["fell_back"]:
        ui.out.print("%d of %d shapes fall back to the library (no tuned config beat it): %s" % (
            len(summary["fell_back"]), summary["shapes"], ", ".join(summary["fell_back"])))
    if summary["weighted_speedup"]:
        ui.out.print("weighted speedup over the library: %.3fx (%+.1f %%) on %d shapes; kept %d, dropped %d%s" % (
            summary["weighted_speedup"], summary["weighted_uplift_pct"], summary["compared"], summary["kept"],
            summary["dropped"], libraries_words(summary)))
    return path


def _counters(df, out_dir: Path, kern: str, threshold: float) -> list:
    from ..report.common import counter_columns
    from ..report.counters import counter_correlation

    if not 0 <= threshold <= 1:
        raise HarnessError("--threshold is an |r| between 0 and 1 (got %g)" % threshold)
    cols = [c for c in counter_columns(df) if df[c].notna().any()]
    if not cols:
        return []
    table = counter_correlation(df, threshold)
    if table.empty:
        return []
    path = out_dir / ("%s.counters.csv" % kern)
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_frame(table).to_csv(path, index=False)
    listed = table[table["listed"]]
    if len(listed):
        ui.out.print("counters explaining the time differences among configs (|r| >= %g; time-like counters left out): %s" % (threshold, ", ".join(
            "%s %s r=%+.2f" % (r["shape_id"], r["counter"], r["r"]) for _, r in listed.head(8).iterrows())))
    return [path]


def _merge(paths, out, force) -> None:
    from ..report.merge import merge_tuned

    if not out:
        raise HarnessError("--merge needs --out FILE (the merged .csv or .yaml)")
    written = merge_tuned(paths, out, force=force)
    ui.out.print("merged %d files into %s" % (len(paths), written))


def _compare(path, tgt, kernel, library, iters, warmup, timeout, jobs, out) -> None:
    from rich.table import Table

    from .. import kernels
    from ..build import BuildOptions
    from ..report.compare import compare
    from ..report.table import _time
    from ..run import RunOptions

    name = kernel or state.get(ROOT, tgt.name)[1].get("kernel")
    if not name:
        raise HarnessError("which kernel do the tuned configs belong to? pass --kernel NAME")
    kern = kernels.get(name)
    result = compare(path, kern, tgt, ROOT, BuildOptions(jobs=jobs), RunOptions(warmup=warmup, iters=iters,
                                                                                 timeout=timeout), library=library)
    table = Table(title="%s on %s, without tuning" % (path, tgt.name))
    for col in ("shape", "config", "status", "claimed", "measured", "measured/claimed", "rel err") + (
            ("library", "speedup") if library else ()):
        table.add_column(col, justify="left" if col in ("shape", "config", "status") else "right")
    for _, r in result.iterrows():
        cells = [r["shape_id"], r["config"], r["status"],
                 _time(r["claimed_us"] * 1e3) if _ok(r["claimed_us"]) else "-",
                 _time(r["measured_us"] * 1e3) if _ok(r["measured_us"]) else "-",
                 "%.2f" % r["measured_over_claimed"] if _ok(r["measured_over_claimed"]) else "-",
                 "%.1e" % r["rel_err"] if _ok(r["rel_err"]) else "-"]
        if library:
            cells += [_time(r["library_us"] * 1e3) if _ok(r["library_us"]) else "-",
                      "%.2fx" % r["speedup_vs_library"] if _ok(r["speedup_vs_library"]) else "-"]
        table.add_row(*cells)
    ui.out.print(table)
    builds = sorted({b for b in result["library_build"] if b}) if library else []
    if builds:
        ui.out.print("library: %s" % "; ".join(builds))
    out_dir = Path(out) if out else ROOT / "tuned" / tgt.name
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / ("compare-%s.csv" % Path(path).name)
    safe_frame(result).to_csv(dest, index=False)
    bad = result[result["status"] != "ok"]
    counts = result["status"].value_counts().to_dict()
    ui.out.print("%d entries: %s; wrote %s" % (len(result), ", ".join("%s %d" % kv for kv in sorted(counts.items())),
                                              dest))
    if len(bad):
        ui.out.print("[red]%d of %d tuned entries did not pass: %s[/]" % (
            len(bad), len(result), "; ".join("%s %s (%s)" % (r["shape_id"], r["status"], r["message"])
                                            for _, r in bad.head(5).iterrows())))
    return len(bad)


def _ok(value) -> bool:
    return value is not None and value == value
