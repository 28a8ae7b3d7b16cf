"""``harness report --html``: one offline page, tables and matplotlib plots embedded as base64
PNG (Agg backend; no script, no stylesheet or font fetched from anywhere).

Sections: the metadata; where the last tune's time went (each device's busy share, what waited
on what, compiles made and reused); the status breakdown (ok / wrong_answer / crash / timeout / ... /
pruned) of the kernel rows; best vs library per shape (with the call_count-weighted total when
weights are given); time against each tuning parameter (time over the shape's best, every
measured variant); counter correlations (|r| >= threshold).
"""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from remote_agent.contract import CONFIG_PREFIX, OK, STATUSES

from .common import Meta, config_columns, config_of, deciding_times, kernel_rows, library_rows, plain
from .counters import counter_correlation
from .uplift import libraries_words, library_label, library_uplift

STATUS_COLORS = {"ok": "#2e7d32", "wrong_answer": "#c62828", "crash": "#6a1b9a", "timeout": "#ef6c00",
                 "load_error": "#8d6e63", "compile_error": "#ad1457", "compile_timeout": "#f9a825",
                 "pruned": "#9e9e9e"}
TUNED_COLOR, LIB_COLOR = "#1f77b4", "#ff7f0e"
MAX_SHAPES_PLOTTED = 40
MAX_CORR_PLOTTED = 25

CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 1.5em auto;
       max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 1.8em;
     border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .55em; text-align: right; white-space: nowrap; }
td.l { white-space: normal; }
th { background: #f0f0f0; } td.l, th.l { text-align: left; }
tr.dropped td { color: #999; } .note { color: #555; font-size: .9em; }
img { max-width: 100%; display: block; margin: .6em 0; border: 1px solid #eee; }
code { font-size: .9em; }
"""


def write_html(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, path, *, weights=None,
               threshold: float = 0.8, max_err_ratio: Optional[float] = None, title: Optional[str] = None,
               tune: Optional[dict] = None) -> Path:
    """Write the report page to ``path``; returns it. ``tune``: the last tune's timing record
    (harness.tune_timing), shown as "Where the tune's time went"."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    meta = Meta.coerce(meta, df)
    kernels = sorted({str(k) for k in df["kernel"].dropna().unique()}) if "kernel" in df.columns else []
    title = title or "harness report: %s" % (", ".join(kernels) or "results")
    parts = ["<!DOCTYPE html>", "<html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<title>%s</title><style>%s</style></head><body>" % (_e(title), CSS),
             "<h1>%s</h1>" % _e(title),
             "<p class=\"note\">generated %s from %d results rows (%d kernel, %d library)</p>" %
             (_e(time.strftime("%Y-%m-%d %H:%M:%S")), len(df), len(kernel_rows(df)), len(library_rows(df)))]
    parts += _meta_section(meta, df)
    parts += _tune_section(tune)
    parts += _status_section(df)
    parts += _best_section(df, best, weights, max_err_ratio)
    parts += _params_section(df)
    parts += _counters_section(df, threshold)
    parts.append("</body></html>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


# ---------------------------------------------------------------- sections


def _meta_section(meta: Meta, df: pd.DataFrame) -> list:
    facts = meta.as_dict()
    for col in ("target", "profiler", "agent_version"):
        if col in df.columns:
            facts[col] = ", ".join(sorted({str(v) for v in df[col].dropna().unique()}))
    rows = [[k, "" if v is None else v] for k, v in facts.items()]
    return ["<h2 id=\"meta\">Where this ran</h2>", _table(["what", "value"], rows, left=2)]


def _tune_section(record: Optional[dict]) -> list:
    """Each device's busy share of the tune's measuring phases and where its seconds went (the
    record ``harness tune`` kept; a file read back, so every value is checked for its type)."""
    from ..tune_timing import PHASES, busy_share

    if not isinstance(record, dict) or not isinstance(record.get("phases"), dict):
        return []
    phases = {str(k): v for k, v in record["phases"].items() if isinstance(v, (int, float))}
    devices = record.get("devices") if isinstance(record.get("devices"), dict) else {}
    clean = {"phases": phases, "devices": {str(d): {p: b for p, b in v.items() if isinstance(b, (int, float))}
                                           for d, v in devices.items() if isinstance(v, dict)}}
    out = ["<h2 id=\"tune\">Where the tune's time went</h2>",
           _table(["phase", "seconds"], [[p, "%.1f" % s] for p, s in phases.items()], left=1)]
    if clean["devices"]:
        shown = [p for p in PHASES if p in phases]
        rows = []
        for device in sorted(clean["devices"]):
            row = [device]
            for p in shown:
                share = busy_share(clean, device, p) if p in clean["devices"][device] else None
                row.append("" if share is None else "%.0f %% (%.1f s)" % (100 * share, clean["devices"][device][p]))
            whole = busy_share(clean, device)
            row.append("" if whole is None else "%.0f %%" % (100 * whole))
            rows.append(row)
        out.append(_table(["device"] + ["busy in the %s" % p for p in shown] + ["busy while measuring"], rows,
                          left=1))
    search = record.get("search") if isinstance(record.get("search"), dict) else {}
    facts = [(label, search.get(key)) for label, key in (
        ("configs/s in the search", "configs_per_s"), ("agents' start (s)", "agent_start_s"),
        ("building rounds (s)", "build_s"), ("build waited on measure (s)", "build_waited_on_measure_s"),
        ("measure waited on build (s)", "measure_waited_on_build_s"), ("pruning the spaces (s)", "pruning_s"),
        ("batches in flight per shape", "ahead"), ("batches in flight at most", "in_flight_max"))]
    compiles = record.get("compiles") if isinstance(record.get("compiles"), dict) else {}
    facts += [("kernels compiled", compiles.get("compiled")), ("compiles reused from the cache", compiles.get("reused"))]
    rows = [[label, "%.1f" % v if isinstance(v, float) else str(v)] for label, v in facts
            if isinstance(v, (int, float))]
    if rows:
        out.append(_table(["what", "value"], rows, left=1))
    out.append("<p class=\"note\">A device's busy share is the seconds a job ran there over the "
               "phase's wall time: the search's start (pruning, the first build, the workers' start) counts "
               "as idle.</p>")
    return out


def _status_section(df: pd.DataFrame) -> list:
    kr = kernel_rows(df)
    counts = kr["status"].value_counts().to_dict()
    names = list(STATUSES) + sorted(set(counts) - set(STATUSES))
    total = max(len(kr), 1)
    rows = [[s, counts.get(s, 0), "%.1f %%" % (100.0 * counts.get(s, 0) / total)] for s in names]
    out = ["<h2 id=\"status\">Status breakdown</h2>", _table(["status", "rows", "share"], rows, left=1)]
    if len(kr):
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 0.8))
        values = [counts.get(s, 0) for s in names]
        ax.barh(names[::-1], values[::-1], color=[STATUS_COLORS.get(s, "#607d8b") for s in names[::-1]])
        for i, v in enumerate(values[::-1]):
            ax.text(v, i, " %d" % v, va="center", fontsize=8)
        ax.set_xlabel("results rows")
        ax.set_title("status of every (variant, shape)")
        out.append(_img(fig, "status breakdown bar chart"))
    return out


def _best_section(df: pd.DataFrame, best, weights, max_err_ratio) -> list:
    out = ["<h2 id=\"best\">Best config vs library, per shape</h2>"]
    table, summary = library_uplift(df, best, weights, max_err_ratio)
    if table.empty:
        return out + ["<p class=\"note\">No shape has an ok result yet.</p>"]
    from .common import tuned_best

    tuned = {r["shape_id"]: r for _, r in tuned_best(df, best).iterrows()}
    rows, classes = [], []
    for _, r in table.iterrows():
        t = tuned.get(r["shape_id"])
        cfg = ", ".join("%s=%s" % kv for kv in config_of(t).items()) if t is not None else ""
        tflops = plain(t.get("tflops")) if t is not None else None
        rows.append([r["shape_id"], r["tuned_variant"] or "", cfg, _us(r["tuned_ns"]),
                     "" if tflops is None else "%.3g" % tflops, library_label(r["library"], r["library_build"]),
                     _us(r["library_ns"]),
                     "" if pd.isna(r["speedup"]) else "%.3fx" % r["speedup"], _fmtw(r["weight"]),
                     "yes" if r["kept"] else "no", r["reason"]])
        classes.append("" if r["kept"] else "dropped")
    out.append(_table(["shape", "best variant", "config", "time", "TFLOP/s", "library", "library time",
                       "speedup", "weight", "kept", "why"], rows, left=3, row_classes=classes, left_cols={9, 10}))
    out.append("<p>%s</p>" % _e(_summary_text(summary)))
    plotted = table[table["tuned_ns"].notna() | table["library_ns"].notna()].head(MAX_SHAPES_PLOTTED)
    if len(plotted):
        import matplotlib.pyplot as plt

        x = np.arange(len(plotted))
        width = 0.4
        fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(plotted) + 2), 4))
        tuned_us = plotted["tuned_ns"].astype(float).to_numpy() / 1e3
        lib_us = plotted["library_ns"].astype(float).to_numpy() / 1e3
        ax.bar(x - width / 2, np.nan_to_num(tuned_us), width, label="best tuned", color=TUNED_COLOR)
        ax.bar(x + width / 2, np.nan_to_num(lib_us), width, label="library", color=LIB_COLOR)
        finite = np.concatenate([tuned_us[np.isfinite(tuned_us)], lib_us[np.isfinite(lib_us)]])
        if len(finite) and finite.min() > 0 and finite.max() / finite.min() > 50:
            ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels(plotted["shape_id"], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("time (us)")
        ax.set_title("best tuned kernel vs library")
        ax.legend()
        out.append(_img(fig, "best tuned vs library time per shape"))
    if len(table) > MAX_SHAPES_PLOTTED:
        out.append("<p class=\"note\">plot shows the first %d of %d shapes</p>" % (MAX_SHAPES_PLOTTED, len(table)))
    return out


def _params_section(df: pd.DataFrame) -> list:
    out = ["<h2 id=\"params\">Time against each tuning parameter</h2>"]
    ok = kernel_rows(df[df["status"] == OK]).copy()
    params = [c for c in config_columns(ok) if ok[c].dropna().nunique() > 1]
    if ok.empty or not params:
        return out + ["<p class=\"note\">No parameter took more than one value among ok results.</p>"]
    ok["_t"] = deciding_times(ok)
    ok["_rel"] = ok["_t"] / ok.groupby("shape_id")["_t"].transform("min")
    out.append("<p class=\"note\">Each point is one variant on one shape: its time (the deciding estimator) over the "
               "shape's best (1 = the best). The line joins the medians per value.</p>")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    ncols = min(3, len(params))
    nrows = -(-len(params) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
    rng = np.random.default_rng(0)
    summary_rows = []
    for ax, col in zip(axes.flat, params):
        sub = ok[[col, "_rel"]].dropna()
        values = sorted(sub[col].unique(), key=_sort_key)
        pos = {v: i for i, v in enumerate(values)}
        xs = sub[col].map(pos).to_numpy(float) + rng.uniform(-0.15, 0.15, len(sub))
        ax.scatter(xs, sub["_rel"], s=10, alpha=0.5, color=TUNED_COLOR)
        med = [float(sub.loc[sub[col] == v, "_rel"].median()) for v in values]
        ax.plot(range(len(values)), med, color="#d62728", marker="o", lw=1.5)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels([str(plain(v)) for v in values], fontsize=8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.set_title(col[len(CONFIG_PREFIX):], fontsize=10)
        ax.set_ylabel("time / best", fontsize=8)
        best_v = values[int(np.argmin(med))]
        summary_rows.append([col[len(CONFIG_PREFIX):], ", ".join(str(plain(v)) for v in values),
                             str(plain(best_v)), "%.3g" % min(med)])
    for ax in list(axes.flat)[len(params):]:
        ax.axis("off")
    fig.tight_layout()
    out.append(_table(["parameter", "values", "best median at", "median time / best"], summary_rows, left=2))
    out.append(_img(fig, "time against each tuning parameter"))
    return out


def _counters_section(df: pd.DataFrame, threshold: float) -> list:
    out = ["<h2 id=\"counters\">Counter correlations</h2>"]
    corr = counter_correlation(df, threshold)
    if corr.empty:
        return out + ["<p class=\"note\">No counter varied over at least 3 ok variants of a shape.</p>"]
    listed = corr[corr["listed"]]
    out.append("<p class=\"note\">Pearson r of each counter against the deciding time across the variants of a "
               "shape; %d of %d (shape, counter) pairs have |r| &ge; %.2f.</p>" % (len(listed), len(corr), threshold))
    if listed.empty:
        return out
    rows = [[r["shape_id"], r["counter"], "%+.3f" % r["r"], int(r["n"])] for _, r in listed.iterrows()]
    out.append(_table(["shape", "counter", "r", "variants"], rows, left=2))
    import matplotlib.pyplot as plt

    top = listed.head(MAX_CORR_PLOTTED)
    labels = ["%s  %s" % (r["counter"], r["shape_id"]) for _, r in top.iterrows()]
    fig, ax = plt.subplots(figsize=(8, 0.3 * len(top) + 1))
    ax.barh(labels[::-1], top["r"].to_numpy()[::-1],
            color=[TUNED_COLOR if v > 0 else LIB_COLOR for v in top["r"].to_numpy()[::-1]])
    ax.axvline(0, color="#333", lw=0.8)
    ax.set_xlim(-1, 1)
    ax.set_xlabel("Pearson r with time")
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title("counters with |r| >= %.2f" % threshold)
    fig.tight_layout()
    out.append(_img(fig, "counter correlation bar chart"))
    return out


# ---------------------------------------------------------------- helpers


def _img(fig, alt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return "<img alt=\"%s\" src=\"data:image/png;base64,%s\">" % (_e(alt), data)


def _table(header, rows, left: int = 1, row_classes=None, left_cols=frozenset()) -> str:
    def cls(i):
        return " class=\"l\"" if i < left or i in left_cols else ""

    head = "".join("<th%s>%s</th>" % (cls(i), _e(h)) for i, h in enumerate(header))
    body = []
    for n, row in enumerate(rows):
        rc = row_classes[n] if row_classes else ""
        cells = "".join("<td%s>%s</td>" % (cls(i), _e("" if v is None else v)) for i, v in enumerate(row))
        body.append("<tr%s>%s</tr>" % (" class=\"%s\"" % rc if rc else "", cells))
    return "<table><thead><tr>%s</tr></thead><tbody>%s</tbody></table>" % (head, "".join(body))


def _e(value) -> str:
    return html.escape(str(value))


def _us(ns) -> str:
    if ns is None or pd.isna(ns):
        return ""
    us = float(ns) / 1e3
    return "%.4g us" % us if us < 1e4 else "%.4g ms" % (us / 1e3)


def _fmtw(w) -> str:
    w = plain(w)
    return "" if w is None else ("%d" % w if isinstance(w, int) else "%.4g" % w)


def _sort_key(v):
    v = plain(v)
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def _summary_text(summary: dict) -> str:
    parts = ["%d shapes" % summary["shapes"], "%d compared with the library" % summary["compared"],
             "%d tuned entries kept, %d dropped" % (summary["kept"], summary["dropped"])]
    if summary["mean_uplift_pct"] is not None:
        parts.append("mean uplift of kept entries %.1f %%" % summary["mean_uplift_pct"])
    if summary["weighted_speedup"] is not None:
        parts.append("weighted total speedup %.3fx (%.1f %% uplift) over the library%s" % (
            summary["weighted_speedup"], summary["weighted_uplift_pct"], libraries_words(summary)))
    return "; ".join(parts) + "."
