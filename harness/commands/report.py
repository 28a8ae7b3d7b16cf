"""harness report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .. import state, ui
from ..errors import HarnessError
from .common import ROOT, TargetsOpt, kernel_of, pick_target
from ..report.common import safe_frame  # CSV cells a spreadsheet would take for formulas

FORMATS = ("aiter", "aiter-blockscale", "triton", "yaml")


def report(
    target: Optional[str] = typer.Option(None, "--target", "-t", help="target to report (default: the last run)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel to report (default: the last built)"),
    no_fetch: bool = typer.Option(False, "--no-fetch", help="use the local results only"),
    formats: Optional[List[str]] = typer.Option(None, "--format", "-f", help="also write: aiter (tuned CSV in the aiter/CK layout), aiter-blockscale (aiter's a8w8 blockscale tuned CSV: gfx, cu_num, M, N, K, libtype, kernelId, splitK, us, kernelName, tflops, bw, errRatio), triton (JSON configs per N,K bucketed by M), yaml (tune_gemm); repeat or comma-separate"),
    all_candidates: bool = typer.Option(False, "--all-candidates", help="aiter: also write every candidate, failures included (aiter's -o2; KERNEL.aiter.all.csv)"),
    sort: bool = typer.Option(False, "--sort", help="aiter: sort rows by arch, cu_num, M, N, K"),
    tag: Optional[str] = typer.Option(None, "--tag", help="triton: the tag in {arch}-GEMM-{tag}.json (default from the dtype)"),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="folder of the tuned files (default tuned/TARGET); with --merge the merged file"),
    html: bool = typer.Option(False, "--html", help="write one offline page with tables and plots (KERNEL.html)"),
    weights: Optional[str] = typer.Option(None, "--weights", help="CSV with shape_id and weight (or calls), e.g. build --summary's; default: the shapes' weights"),
    err_ratio: Optional[float] = typer.Option(None, "--err-ratio", help="largest share of output elements outside tolerance a tuned entry may have"),
    only_faster: bool = typer.Option(False, "--only-faster", help="tuned files keep only entries faster than the library and within --err-ratio"),
    threshold: float = typer.Option(0.8, "--threshold", help="counter correlation: list counters with |r| at or above this"),
    merge: Optional[List[str]] = typer.Option(None, "--merge", help="merge these tuned files (repeat; .csv or .yaml) into --out; nothing is measured"),
    force: bool = typer.Option(False, "--force", help="--merge: merge files of different arch, device or CU count"),
    compare_wo_tuning: Optional[str] = typer.Option(None, "--compare-wo-tuning", help="rebuild exactly the configs of this tuned file (.csv, .yaml, .json), run them, check answers, report their times"),
    library: bool = typer.Option(False, "--library", help="--compare-wo-tuning: also run the library reference on every shape"),
    iters: int = typer.Option(10, "--iters", help="--compare-wo-tuning: timed iterations"),
    warmup: int = typer.Option(2, "--warmup", help="--compare-wo-tuning: untimed runs before timing"),
    timeout: float = typer.Option(60.0, "--timeout", help="--compare-wo-tuning: seconds per config and shape"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="--compare-wo-tuning: parallel compiles (default: all cores)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Fetch remote results (one tar stream), pick the best config per shape from ok rows
    (differences within the measured spread are ties, broken by lower spread; a winner
    re-measured by `harness tune` is used where there is one), write tuned/TARGET/KERNEL.csv and
    .json (plus --format files) and print a table. Library rows (lib:...) give the uplift."""
    if merge:
        return _merge(merge, out, force)
    fmts = _formats(formats)
    if err_ratio is not None and not 0 <= err_ratio <= 1:
        raise HarnessError("--err-ratio is a share of output elements, 0 to 1 (got %g)" % err_ratio)
    tgt = pick_target(target, targets_file, "report", last="last_run")
    if compare_wo_tuning:
        return _compare(compare_wo_tuning, tgt, kernel, library, iters, warmup, timeout, jobs, out)

    from ..report.aggregate import best_per_shape, load_results, status_counts
    from ..report.common import kernel_rows, library_rows
    from ..report.fetch import fetch_target
    from ..report.table import best_table
    from ..report.tuned import write_tuned
    from ..rounds import load_winners
    from ..run import local_results_path

    kern = kernel_of(tgt.name, kernel)
    local = local_results_path(ROOT, tgt.name, kern)
    _, facts = state.get(ROOT, tgt.name)
    fetched = tgt.is_remote and facts.get("results_remote", True) and not no_fetch
    if fetched:
        new = fetch_target(tgt, kern, local)
        ui.console.print("fetched %d new rows from %s" % (new, tgt.name))
    from ..bundle import bundle_dir
    from ..compile.disasm import with_vector_counts
    from ..report.results_reader import Known

    bundle = bundle_dir(ROOT, tgt.name, kern)
    df = load_results([local], known=Known.from_bundle(bundle), say=lambda line: ui.out.print(line, markup=False, soft_wrap=True))
    best = best_per_shape(kernel_rows(df))
    winners = load_winners(local)["shapes"]
    best = apply_winners(best, df, winners)
    best = with_vector_counts(best, bundle)  # vector instructions, when counted
    meta, shape_objs = _meta_and_shapes(tgt, bundle, refresh=fetched or not tgt.is_remote, local=local)
    out_dir = Path(out) if out else ROOT / "tuned" / tgt.name
    if weights is None:
        shape_weights = {s.id: s.weight for s in shape_objs}
        weights_src = shape_weights if any(w != 1.0 for w in shape_weights.values()) else None
    else:
        weights_src = weights
    has_library = len(library_rows(df)) > 0
    ship = best
    if has_library or err_ratio is not None:
        from ..report.uplift import library_uplift

        table, _ = library_uplift(df, best, weights_src, err_ratio)
        if only_faster:
            kept = set(table.loc[table["kept"], "shape_id"])
            ship = best[best["shape_id"].isin(kept)].reset_index(drop=True)
            dropped = sorted(set(best["shape_id"]) - kept)
            if dropped:
                ui.out.print("[yellow]--only-faster leaves out %d shapes: %s[/]" % (len(dropped), ", ".join(dropped)))
    elif only_faster:
        ui.out.print("[yellow]--only-faster: no library rows in the results (build with --library); nothing left out[/]")
    everything = df.assign(arch=meta["arch"], device_name=meta["device"], cu_num=meta["cu_num"],
                           driver=meta["driver"], toolchain=meta["toolchain"], triton=meta["triton"])
    json_meta = dict(meta, target=tgt.name, devices=sorted(df["device"].astype(str).unique().tolist()),
                     hosts=sorted(df["host"].dropna().astype(str).unique().tolist()))
    csv_path, json_path = write_tuned(everything, ship, out_dir, kern, json_meta)
    written = [csv_path, json_path]
    ui.out.print(best_table(best, status_counts(df)))
    _print_winners(best, winners)
    missing = sorted(set(kernel_rows(df)["shape_id"]) - set(best["shape_id"]))
    if missing:
        ui.out.print("[yellow]no ok config for: %s[/]" % ", ".join(missing))
        _explain_pruned(bundle, kern, tgt, missing)
    if ship.empty and not best.empty:
        ui.out.print("[yellow]no tuned entry is left to write to --format files[/]")
    else:
        written += _write_formats(fmts, df, ship, meta, out_dir, kern, shape_objs, all_candidates, sort, tag)
    if has_library:
        written.append(_uplift(df, best, out_dir, kern, weights_src, err_ratio))
    written += _counters(df, out_dir, kern, threshold)
    if html:
        from ..report.html import write_html

        written.append(write_html(df, best, meta, out_dir / ("%s.html" % kern), weights=weights_src,
                                  threshold=threshold, max_err_ratio=err_ratio,
                                  title="harness report: %s on %s" % (kern, tgt.name)))
    ui.out.print("wrote %s" % ", ".join(str(p) for p in written))


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
    written = []
    if "aiter" in fmts:
        from ..report.aiter_csv import write_tuned_csv

        written += write_tuned_csv(df, best, meta, out_dir / ("%s.aiter.csv" % kern),
                                   all_path=out_dir / ("%s.aiter.all.csv" % kern) if all_candidates else None,
                                   sort=sort, shapes=shapes)
    elif all_candidates or sort:
        ui.out.print("[yellow]--all-candidates and --sort go with --format aiter[/]")
    if "aiter-blockscale" in fmts:
        from ..report.aiter_blockscale_csv import write_tuned_csv as write_blockscale_csv

        written.append(write_blockscale_csv(df, best, meta, out_dir / ("%s.aiter_blockscale.csv" % kern)))
    if "triton" in fmts:
        from ..report.triton_json import write_triton_json

        paths = write_triton_json(df, best, meta, out_dir / "triton", tag)
        written.append("%s (%d files)" % (out_dir / "triton", len(paths)))
    if "yaml" in fmts:
        from ..report.tune_gemm_yaml import write_tuned_yaml

        written.append(write_tuned_yaml(df, best, meta, out_dir / ("%s.yaml" % kern)))
    return written


def _uplift(df, best, out_dir: Path, kern: str, weights, err_ratio) -> Path:
    from rich.table import Table

    from ..report.table import _time
    from ..report.uplift import library_uplift, write_uplift

    path, summary = write_uplift(df, best, out_dir / ("%s.uplift.csv" % kern), weights, err_ratio)
    table, _ = library_uplift(df, best, weights, err_ratio)
    t = Table(title="against the library")
    for col in ("shape", "library", "library time", "tuned time", "speedup", "weight", "kept", "reason", "uses"):
        t.add_column(col, justify="left" if col in ("shape", "library", "reason", "uses") else "right")
    for _, r in table.iterrows():
        t.add_row(r["shape_id"], str(r["library"] or "-"), _time(r["library_ns"]) if r["library_ns"] == r["library_ns"]
                  and r["library_ns"] is not None else "-",
                  _time(r["tuned_ns"]) if r["tuned_ns"] == r["tuned_ns"] and r["tuned_ns"] is not None else "-",
                  "%.2fx" % r["speedup"] if r["speedup"] == r["speedup"] and r["speedup"] is not None else "-",
                  "%g" % r["weight"], "yes" if r["kept"] else "no", r["reason"], r["uses"])
    ui.out.print(t)
    if summary["fell_back"]:
        ui.out.print("%d of %d shapes fall back to the library (no tuned config beat it): %s" % (
            len(summary["fell_back"]), summary["shapes"], ", ".join(summary["fell_back"])))
    if summary["weighted_speedup"]:
        ui.out.print("weighted speedup over the library: %.3fx (%+.1f %%) on %d shapes; kept %d, dropped %d" % (
            summary["weighted_speedup"], summary["weighted_uplift_pct"], summary["compared"], summary["kept"],
            summary["dropped"]))
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
        raise typer.Exit(1)


def _ok(value) -> bool:
    return value is not None and value == value
