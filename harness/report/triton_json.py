"""Triton JSON configs per (N, K), bucketed by M, in the layout aiter's Triton GEMMs read.

One file per (dtype, layout, N, K): ``{arch}-GEMM-{tag}-N={N}-K={K}.json``, holding one config
per M bucket::

    small        M < 32
    medium_M32   32 <= M <= 128 and next_power_of_2(M) == 32
    medium_M64   ... == 64
    medium_M128  ... == 128
    large        128 < M <= 256
    xlarge       M > 256
    any          the config of the largest M tuned (used for an M no bucket covers)

and a default file ``{arch}-GEMM-{tag}.json`` with, per bucket, the most common config across
the (N, K) files. The tag defaults to ``A16W16`` (fp16/bf16) or ``A32W32`` (fp32); when one tag
would cover several layouts, the layout is added (``A16W16_NT``).

Where a bucket holds several tuned M, its config is the one with the lowest mean slowdown
(time / that M's best time) among configs measured ok on all of them; if none was, the best
config of the bucket's largest M.

Config keys use Triton's spelling (``BLOCK_SIZE_M``, ``GROUP_SIZE_M``, ``num_warps`` ...;
``SPLIT_K`` becomes ``NUM_KSPLIT``). Each file also holds a ``_harness`` entry (arch, device,
cu_num, driver, toolchain, triton, dtype, layout, and the M tuned per bucket), which lookups
by bucket never read.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

import pandas as pd

from remote_agent.contract import OK

from ..errors import HarnessError
from .common import TRITON_NAMES, Meta, config_key, config_of, deciding_time, kernel_rows, tuned_best

BUCKETS = ("small", "medium_M32", "medium_M64", "medium_M128", "large", "xlarge", "any")
JSON_NAMES = dict(TRITON_NAMES, SPLIT_K="NUM_KSPLIT")
META_KEY = "_harness"
DTYPE_TAGS = {"fp16": "A16W16", "bf16": "A16W16", "fp32": "A32W32"}


def next_power_of_2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def bucket(M: int) -> str:
    """The bucket an M falls in (never 'any')."""
    if M < 32:
        return "small"
    if M <= 128:
        return "medium_M%d" % next_power_of_2(M)
    if M <= 256:
        return "large"
    return "xlarge"


def pick_config(configs: dict, M: int) -> dict:
    """The config a consumer uses for M: its bucket's, else ``any`` (what aiter's lookup does)."""
    key = bucket(M)
    if key in configs:
        return configs[key]
    if "any" in configs:
        return configs["any"]
    raise KeyError("no config for M=%d (no %r and no 'any')" % (M, key))


def file_name(arch: str, tag: str, N: Optional[int] = None, K: Optional[int] = None) -> str:
    if N is None:
        return "%s-GEMM-%s.json" % (arch, tag)
    return "%s-GEMM-%s-N=%d-K=%d.json" % (arch, tag, N, K)


def to_triton(config: dict) -> dict:
    return {JSON_NAMES.get(k, k): v for k, v in config.items()}


def write_triton_json(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, out_dir, tag: Optional[str] = None) -> list:
    """Write one JSON per (dtype, layout, N, K) and one default file per tag into ``out_dir``.
    Returns the paths written (default files last)."""
    meta = Meta.coerce(meta, df)
    if not meta.arch:
        raise HarnessError("the Triton JSON file names start with the arch: give the metadata an arch")
    top = tuned_best(df, best)
    if top.empty:
        raise HarnessError("no shape has an ok kernel result: nothing to write to Triton JSON")
    ok = kernel_rows(df[df["status"] == OK])
    combos = top[["dtype", "layout"]].drop_duplicates()
    tags = {}
    for dtype, layout in combos.itertuples(index=False):
        base = tag or DTYPE_TAGS.get(dtype, dtype.upper())
        tags[(dtype, layout)] = base
    uses = Counter(tags.values())
    tags = {(dtype, layout): ("%s_%s" % (base, layout) if uses[base] > 1 else base)
            for (dtype, layout), base in tags.items()}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, per_tag = [], defaultdict(list)
    for (dtype, layout, N, K), group in top.groupby(["dtype", "layout", "N", "K"], sort=True):
        cands = ok[(ok["dtype"] == dtype) & (ok["layout"] == layout) & (ok["N"] == N) & (ok["K"] == K)]
        configs, tuned_ms = _buckets(group, cands)
        t = tags[(dtype, layout)]
        doc = {b: to_triton(configs[b]) for b in BUCKETS if b in configs}
        doc[META_KEY] = dict(meta.as_dict(), dtype=dtype, layout=layout, N=int(N), K=int(K), tag=t,
                             tuned_M={b: ms for b, ms in tuned_ms.items()})
        path = out_dir / file_name(meta.arch, t, int(N), int(K))
        path.write_text(json.dumps(doc, indent=4) + "\n")
        written.append(path)
        per_tag[t].append(doc)
    for t, docs in per_tag.items():
        default = {}
        for b in BUCKETS:
            counts = Counter(tuple(sorted(d[b].items())) for d in docs if b in d)
            if counts:
                default[b] = dict(counts.most_common(1)[0][0])
        default[META_KEY] = dict(meta.as_dict(), tag=t, default=True,
                                 files=[file_name(meta.arch, t, d[META_KEY]["N"], d[META_KEY]["K"]) for d in docs])
        path = out_dir / file_name(meta.arch, t)
        path.write_text(json.dumps(default, indent=4) + "\n")
        written.append(path)
    return written


def read_triton_json(path) -> dict:
    """A config file back, without the ``_harness`` entry."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HarnessError("malformed JSON: %s" % exc.msg, where="%s:%d" % (path, exc.lineno))
    return {k: v for k, v in data.items() if k != META_KEY}


def _buckets(best_rows: pd.DataFrame, cands: pd.DataFrame) -> tuple:
    """bucket -> harness config, and bucket -> the M tuned in it."""
    by_bucket = defaultdict(list)
    for _, row in best_rows.iterrows():
        by_bucket[bucket(int(row["M"]))].append(row)
    configs, tuned_ms = {}, {}
    for b, rows in by_bucket.items():
        ms = sorted(int(r["M"]) for r in rows)
        tuned_ms[b] = ms
        configs[b] = _bucket_config(rows, cands)
    largest = best_rows.loc[best_rows["M"].idxmax()]
    configs["any"] = config_of(largest)
    tuned_ms["any"] = [int(largest["M"])]
    return configs, tuned_ms


def _bucket_config(rows: list, cands: pd.DataFrame) -> dict:
    if len(rows) == 1:
        return config_of(rows[0])
    best_time = {int(r["M"]): deciding_time(r) for r in rows}
    slowdowns = defaultdict(dict)  # config key -> {M: time / best}
    configs = {}
    for _, c in cands[cands["M"].isin(list(best_time))].iterrows():
        cfg = config_of(c)
        k = config_key(cfg)
        configs[k] = cfg
        m = int(c["M"])
        ratio = deciding_time(c) / best_time[m]
        slowdowns[k][m] = min(ratio, slowdowns[k].get(m, ratio))
    full = [(sum(v.values()) / len(v), k) for k, v in slowdowns.items() if len(v) == len(best_time)]
    if full:
        return configs[min(full, key=lambda x: (x[0], repr(x[1])))[1]]
    largest = max(rows, key=lambda r: int(r["M"]))
    return config_of(largest)
