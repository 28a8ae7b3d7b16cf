"""``harness report --compare-wo-tuning FILE``: verify tuned results someone else made.

Rebuild exactly the configs a tuned file names (one per entry: shape and config), run them on the
target, check every answer against the reference (the agent's check: NaN-poisoned output,
relative error within the dtype's tolerance) and report the measured time next to the time the
file claims. Nothing is searched and nothing else is built.

Tuned files read: the aiter/CK tuned CSV the harness writes (``kernelName`` spells the config),
the tune_gemm YAML (``- {M: .., rowMajorA: .., BLOCK_SIZE_M: .., ...} # ... time(us): ..``) and
the harness's own ``tuned/<target>/<kernel>.json``.

The rounds run in their own project folder (``.harness/compare/<file name>``) and, on a remote,
their own folders there (target name ``<target>--compare``), so they never mix with the
target's results or replace its bundle.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from remote_agent.contract import CONFIG_PREFIX, OK, PRUNED, deciding_time, finite_float

from ..errors import HarnessError
from ..library import is_library_id

SUFFIX = "--compare"
COLUMNS = ["line", "shape_id", "M", "N", "K", "dtype", "layout", "config", "status", "claimed_us",
           "measured_us", "measured_over_claimed", "spread_us", "rel_err", "err_ratio", "library", "library_build", "library_us",
           "speedup_vs_library", "variant_id", "message"]


@dataclass
class Entry:
    shape: object  # harness.shapes.Shape
    config: dict
    claimed_us: Optional[float]
    where: str


def read_entries(path, kernel, target) -> list:
    """The (shape, config, claimed time) entries of a tuned file, each config checked against the
    kernel's parameters on this target."""
    path = Path(path)
    if not path.is_file():
        raise HarnessError("tuned file %s does not exist" % path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        entries = _from_csv(path, kernel)
    elif suffix in (".yaml", ".yml"):
        entries = _from_yaml(path)
    elif suffix == ".json":
        entries = _from_json(path)
    else:
        raise HarnessError("cannot tell the kind of tuned file %s: .csv (aiter/CK), .yaml (tune_gemm) or "
                           ".json (harness)" % path)
    if not entries:
        raise HarnessError("no tuned entries in the file", where=str(path))
    names = list(kernel.space_for(target))
    if suffix in (".yaml", ".yml"):  # tune_gemm's keys the kernel lacks, and its switches the YAML lacks
        from ..shapes.tune_gemm_yaml import harness_config
        from .common import HARNESS_ONLY

        for e in entries:
            e.config = harness_config(e.config, names, e.where)
            e.config.update({k: 0 for k in HARNESS_ONLY if k in names and k not in e.config})
    for e in entries:
        if set(e.config) != set(names):
            extra = sorted(set(e.config) - set(names))
            missing = [n for n in names if n not in e.config]
            raise HarnessError("config %s does not fit %s on %s (%s%s%s)" % (
                _spell(e.config), kernel.name, target.name, "unknown: %s" % ", ".join(extra) if extra else "",
                "; " if extra and missing else "", "missing: %s" % ", ".join(missing) if missing else ""),
                where=e.where)
        e.config = {n: e.config[n] for n in names}
    return entries


def _from_csv(path: Path, kernel) -> list:
    from .aiter_csv import read_tuned_configs, read_tuned_csv

    frame = read_tuned_csv(path)
    pairs = read_tuned_configs(path, kernel.name)
    return [Entry(shape, config, finite_float(us), "%s:%d" % (path, i + 2))
            for i, ((shape, config), us) in enumerate(zip(pairs, frame["us"]))]


def _from_yaml(path: Path) -> list:
    from .tune_gemm_yaml import read_tuned_yaml
    from ..shapes import make_shape
    from ..shapes.tune_gemm_yaml import CONFIG_NAMES, DIM_KEYS, DTYPE_ALIASES, DTYPE_KEYS, MAJOR_KEYS, major_letter

    frame, _ = read_tuned_yaml(path)
    out = []
    for _, row in frame.iterrows():
        item = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
        where = "%s:%d" % (path, int(item.pop("_line")))
        us = finite_float(item.pop("us", None))
        missing = [k for k in DIM_KEYS if k not in item]
        if missing:
            raise HarnessError("entry lacks %s" % ", ".join(missing), where=where)
        layout = "".join(major_letter(item.get(k, "T"), k, where) for k in MAJOR_KEYS)
        dtype = "fp16"
        for k in DTYPE_KEYS:
            if k in item:
                dtype = DTYPE_ALIASES.get(str(item[k]).strip().lower())
                if dtype is None:
                    raise HarnessError("%s: %r is not a dtype the harness runs" % (k, item[k]), where=where)
                break
        config = {CONFIG_NAMES.get(k, k): _int(v) for k, v in item.items()
                  if k not in DIM_KEYS + MAJOR_KEYS + DTYPE_KEYS}
        if "NUM_KSPLIT" in config:
            config["SPLIT_K"] = config.pop("NUM_KSPLIT")
        out.append(Entry(make_shape(_int(item["M"]), _int(item["N"]), _int(item["K"]), dtype=dtype, layout=layout,
                                    where=where), config, us, where))
    return out


def _from_json(path: Path) -> list:
    from ..shapes import make_shape

    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HarnessError("malformed JSON: %s" % exc.msg, where="%s:%d" % (path, exc.lineno))
    best = data.get("best") if isinstance(data, dict) else None
    if not isinstance(best, list):
        raise HarnessError("not a harness tuned JSON (no \"best\" list)", where=str(path))
    out = []
    for i, b in enumerate(best):
        where = "%s: best[%d]" % (path, i)
        try:
            shape = make_shape(b["M"], b["N"], b["K"], dtype=b["dtype"], layout=b.get("layout", "NN"), where=where)
            config = dict(b["config"])
        except (KeyError, TypeError) as exc:
            raise HarnessError("entry lacks %s" % exc, where=where)
        t = b.get("time_ns", b.get("time_ns_median"))  # tuned JSON: the deciding time (older: the median)
        out.append(Entry(shape, config, float(t) / 1e3 if t is not None else None, where))
    return out


def compare(path, kernel, target, root: Path, build_options, run_options, library: bool = False,
            quiet: bool = True) -> pd.DataFrame:
    """Build and run every entry of the tuned file; one row per entry (COLUMNS)."""
    from ..rounds import Session
    from ..strategies import key

    entries = read_entries(path, kernel, target)
    side_root = Path(root) / ".harness" / "compare" / Path(path).name
    side_target = dataclasses.replace(target, name=target.name + SUFFIX)
    shapes = list(dict.fromkeys(e.shape for e in entries))
    _reuse_artifacts(root, target, side_root, side_target, kernel)
    session = Session(side_root, side_target, kernel, shapes, build_options, run_options, library=library,
                      quiet=quiet)
    pairs, seen = [], set()
    for e in entries:
        k = (key(e.config), e.shape.id)
        if k not in seen:
            seen.add(k)
            pairs.append((e.config, e.shape))
    try:
        rows = session.execute(pairs, 1, shapes if library else ())
    finally:
        session.close()
    measured = {}
    library_rows = {}
    for row in rows:
        if is_library_id(row.get("variant_id")):
            library_rows[row["shape_id"]] = row
            continue
        cfg = {c[len(CONFIG_PREFIX):]: row[c] for c in row if c and c.startswith(CONFIG_PREFIX) and row[c] != ""}
        measured[(tuple(sorted((k, str(v)) for k, v in cfg.items())), row["shape_id"])] = row
    out = []
    for e in entries:
        row = measured.get((tuple(sorted((k, str(v)) for k, v in e.config.items())), e.shape.id))
        lib = library_rows.get(e.shape.id)
        status = row.get("status") if row else "not_run"
        t = deciding_time(row) if row and status == OK else None
        lib_t = deciding_time(lib) if lib and lib.get("status") == OK else None
        p20, p80 = (finite_float(row.get("time_ns_p20")), finite_float(row.get("time_ns_p80"))) if row else (None, None)
        out.append({
            "line": e.where, "shape_id": e.shape.id, "M": e.shape.M, "N": e.shape.N, "K": e.shape.K,
            "dtype": e.shape.dtype, "layout": e.shape.layout, "config": _spell(e.config), "status": status,
            "claimed_us": e.claimed_us, "measured_us": t / 1e3 if t else None,
            "measured_over_claimed": (t / 1e3 / e.claimed_us) if (t and e.claimed_us) else None,
            "spread_us": (p80 - p20) / 1e3 if (t and p20 is not None and p80 is not None) else None,
            "rel_err": finite_float(row.get("rel_err")) if row else None,
            "err_ratio": finite_float(row.get("err_ratio")) if row else None,
            "library": lib.get("variant_id") if lib else None,
            "library_build": (lib.get("library") or "") if lib else "", "library_us": lib_t / 1e3 if lib_t else None,
            "speedup_vs_library": (lib_t / t) if (t and lib_t) else None,
            "variant_id": row.get("variant_id") if row else None,
            "message": (row.get("message") or "") if row else _not_run(kernel, target, e),
        })
        if not row and out[-1]["message"].startswith("pruned"):
            out[-1]["status"] = PRUNED
    return pd.DataFrame(out, columns=COLUMNS)


def _reuse_artifacts(root, target, side_root, side_target, kernel) -> None:
    """Artifacts are named by a hash of what they are built from (not of the target's name):
    link the target's own into the compare bundle so configs built before are not rebuilt."""
    import os
    import shutil

    from ..bundle import bundle_dir

    src = bundle_dir(root, target.name, kernel.name) / "artifacts"
    dest = bundle_dir(side_root, side_target.name, kernel.name) / "artifacts"
    if not src.is_dir():
        return
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".tmp") and not (dest / f.name).exists():
            try:
                os.link(f, dest / f.name)
            except OSError:
                shutil.copy2(f, dest / f.name)


def _not_run(kernel, target, entry) -> str:
    from ..space import first_pruning_rule

    rule = first_pruning_rule(kernel.rules_for(target), entry.config, entry.shape, target)
    if rule is not None:
        return "pruned: %s: %s" % (rule.name, rule.why)
    return "no result came back for it"


def _spell(config: dict) -> str:
    return " ".join("%s=%s" % kv for kv in config.items())


def _int(value):
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
