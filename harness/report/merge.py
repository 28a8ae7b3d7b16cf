"""Merge tuned files: deduplicate by key, keep the fastest, refuse to mix arch or device.

Works on the aiter/CK tuned CSV (``.csv``) and the tune_gemm YAML (``.yaml``/``.yml``); all
inputs must be of one kind and the output is of that kind.

- CSV key: every column that is not a measurement (``arch, cu_num, M, N, K``, the untuned CSV's
  extra columns, ``dtype``, ``layout``); the row with the lowest ``us`` wins. aiter's own files
  (``gfx`` instead of ``arch``) are read too and written back with ``gfx``.
- YAML key: ``M, N, K, rowMajorA, rowMajorB, dtype``; the time is the ``time(us)`` comment.

Files of different arch, device name or CU/SM count are refused unless ``force``; merged with
force, arch and cu_num stay part of the CSV key so each keeps its own rows.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import HarnessError
from .aiter_csv import ALL_EXTRA, META_COLUMNS, RESULT_COLUMNS, read_tuned_csv
from .tune_gemm_yaml import HEADER, read_tuned_yaml

MEASURED = set(RESULT_COLUMNS) | set(ALL_EXTRA) | (set(META_COLUMNS) - {"dtype", "layout"}) | {
    # aiter's own tuned files
    "solidx", "libtype", "err_ratio", "kernelId"}  # q_dtype_w is part of aiter's key (int8 and fp8 rows differ)
YAML_KEY = ["M", "N", "K", "rowMajorA", "rowMajorB", "dtype"]


def merge_tuned(paths, out, force: bool = False) -> Path:
    """Merge tuned files into ``out``; returns ``out``. Raises HarnessError naming the files that
    disagree on arch, device or cu_num (unless ``force``)."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise HarnessError("no tuned files to merge")
    kinds = {_kind(p) for p in paths} | {_kind(Path(out))}
    if len(kinds) != 1:
        raise HarnessError("cannot merge different kinds of tuned files (%s); merge CSV with CSV and "
                           "YAML with YAML" % ", ".join(str(p) for p in paths + [Path(out)]))
    if kinds == {"csv"}:
        return _merge_csv(paths, Path(out), force)
    return _merge_yaml(paths, Path(out), force)


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    raise HarnessError("cannot tell the kind of tuned file %s: name it .csv (aiter/CK) or .yaml (tune_gemm)" % path)


def _check_same(facts: dict, force: bool) -> None:
    """facts: path -> {arch: set, device: set, cu_num: set}."""
    for what in ("arch", "device", "cu_num"):
        seen = {}
        for path, f in facts.items():
            for value in f.get(what, ()):
                seen.setdefault(value, []).append(str(path))
        if len(seen) > 1 and not force:
            detail = "; ".join("%s %s in %s" % (what, v, ", ".join(sorted(set(ps)))) for v, ps in seen.items())
            raise HarnessError("refusing to merge tuned files of different %s (%s); a config tuned on one "
                               "does not hold on the other. Pass --force to merge anyway." % (what, detail))


def _values(series) -> set:
    out = set()
    for v in series.dropna().unique():
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        text = str(v).strip()
        if text:
            out.add(text)
    return out


def _merge_csv(paths, out: Path, force: bool) -> Path:
    frames, facts, used_gfx = [], {}, False
    for p in paths:
        frame = read_tuned_csv(p)
        used_gfx = used_gfx or "gfx" in pd.read_csv(p, nrows=0).columns
        facts[p] = {c: _values(frame[c]) for c in ("arch", "device", "cu_num") if c in frame.columns}
        frames.append(frame)
    _check_same(facts, force)
    df = pd.concat(frames, ignore_index=True, sort=False)
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    key = [c for c in columns if c not in MEASURED and c != "us"]
    df = df.sort_values("us", kind="stable", na_position="last")
    df = df.drop_duplicates(key, keep="first")
    sort_by = [c for c in ("arch", "cu_num", "M", "N", "K") if c in df.columns]
    df = df.sort_values(sort_by, kind="stable")[columns]
    if used_gfx:
        df = df.rename(columns={"arch": "gfx"})
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    return out


def _merge_yaml(paths, out: Path, force: bool) -> Path:
    entries, facts, metas = [], {}, []
    for p in paths:
        frame, meta = read_tuned_yaml(p)
        facts[p] = {k: {str(meta[k])} for k in ("arch", "device", "cu_num") if meta.get(k)}
        metas.append(meta)
        for _, row in frame.iterrows():
            entries.append((row, p))
    _check_same(facts, force)
    best = {}
    for row, p in entries:
        key = tuple(str(row.get(k)) for k in YAML_KEY)
        us = row.get("us")
        us = float("inf") if us is None or pd.isna(us) else float(us)
        if key not in best or us < best[key][0]:
            best[key] = (us, row, p)
    lines = [HEADER]
    first = metas[0] if metas else {}
    for k in ("arch", "device", "cu_num", "driver", "toolchain", "triton"):
        values = sorted({m.get(k, "") for m in metas} - {""})
        lines.append("# %s: %s" % (k, values[0] if len(values) == 1 else ", ".join(values) or first.get(k, "")))
    for us, row, p in sorted(best.values(), key=lambda t: _order(t[1])):
        text = Path(p).read_text().splitlines()[int(row["_line"]) - 1].strip()
        lines.append(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    return out


def _order(row) -> tuple:
    def part(value):
        try:
            return (0, int(value), "")
        except (TypeError, ValueError):
            return (1, 0, str(value))

    return tuple(part(row.get(k)) for k in ("dtype", "rowMajorA", "rowMajorB", "N", "K", "M"))
