"""Triton JSON configs per (N, K) in the layout aiter's Triton GEMMs read, one family per kernel.

The consumer is ``aiter.ops.triton.utils.gemm_config_utils.get_gemm_config(config_name, M, N, K)``
(aiter e4048607). For the families written here (``GEMM-A16W16`` for the matmul,
``GEMM-A8W8_BLOCKSCALE`` for fp8_blockscale, ``GEMM-AFP4WFP4`` for a4w4_blockscale: aiter's
``gemm_afp4wfp4`` looks its config up with K doubled from the packed K/2 of its operands, i.e.
by the unpacked K the harness's shapes have, and reads BLOCK_SIZE_K in unpacked values too) aiter
reads the flat folder
``aiter/ops/triton/configs/gemm/``: the default file ``{arch}-{family}.json`` (it must exist) and,
when present, ``{arch}-{family}-N={N}-K={K}.json``, which replaces it for that (N, K). In the file
it takes, for M:

1. the first ``M_LEQ_x`` key with M <= x, x ascending over (1, 4, 8, 16, 32, 64, 128, 256, 512,
   1024, 2048, 4096, 8192);
2. else the first ``M_GEQ_x`` key with M >= x, x descending;
3. else ``any`` (and then reports the shape as untuned).

Each (N, K) file written here has a key for every bound a tuned M falls under (``M_LEQ_x`` with x
the smallest bound >= M; ``M_GEQ_8192`` for M > 8192) and an ``M_GEQ_x`` at the largest ``M_LEQ``
bound used (its config), so every M finds a tuned key (never ``any``; ``any`` is written too, as aiter's rules ask).
Where one key covers several tuned M, its config is the one with the lowest mean slowdown (time /
that M's best time) among configs measured ok on all of them; if none was, the best config of
the largest M there.

Configs use aiter's key names (``BLOCK_SIZE_M``, ``GROUP_SIZE_M``, ``NUM_KSPLIT`` ...) and carry
every key aiter's GEMM JSON requires: a key the harness did not tune on this target gets aiter's
neutral value (``waves_per_eu`` 0, ``matrix_instr_nonkdim`` 16, ``kpack`` 1, ``cache_modifier``
null, ``NUM_KSPLIT`` 1), listed in the ``_harness`` entry under ``filled``.

What aiter's kernels cannot run is not written as something else: the matmul family is
``Y = X @ W^T`` (our ``NT``) in fp16/bf16, so other layouts and dtypes are left out with a line;
aiter's fp8 blockscale kernel asserts ``BLOCK_SIZE_K == 128`` (its scale block), so such a shape
gets the fastest config with BLOCK_K 128 (a line says so); configs using the harness's NVIDIA-only
switches (TMA, SWAP_AB, PERSISTENT, STREAM_K) are not aiter's kernel either.

The default file this writes (the most common config per key across the (N, K) files) goes into
``default/``: aiter ships its own default for every arch, and copying ours over it would change
every shape not tuned here.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from remote_agent.contract import OK

from ..errors import HarnessError
from .common import HARNESS_ONLY, TRITON_NAMES, Meta, config_key, config_of, deciding_time, kernel_rows
from .pick import pick_rows, say_default

BOUNDS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)  # aiter's STANDARD_M_BOUNDS
JSON_NAMES = dict(TRITON_NAMES, SPLIT_K="NUM_KSPLIT")
META_KEY = "_harness"
REQUIRED = {"waves_per_eu": 0, "matrix_instr_nonkdim": 16, "kpack": 1, "cache_modifier": None, "NUM_KSPLIT": 1}
DEFAULT_DIR = "default"


def family_of(kernel: str, dtype: str, layout: str) -> tuple:
    """(aiter config family, None) for what aiter runs, else (None, why not)."""
    if kernel == "fp8_blockscale":
        return "GEMM-A8W8_BLOCKSCALE", None
    if kernel == "a4w4_blockscale":
        return "GEMM-AFP4WFP4", None
    if kernel == "matmul":
        if dtype in ("fp16", "bf16") and layout == "NT":
            return "GEMM-A16W16", None
        return None, "aiter's Triton GEMM-A16W16 is X @ W^T (layout NT) in fp16 or bf16"
    return None, "aiter has no Triton GEMM family for kernel %s" % kernel


def accept_for(kernel: str) -> Callable[[dict], Optional[str]]:
    """The consumer's check of one config: None where aiter's kernel runs it, else why not."""
    def accept(config: dict) -> Optional[str]:
        missing = [k for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k not in config]
        if missing:  # e.g. the CPU boards' packed C++ matmul (MR, NR, KC, ...)
            return "is not a Triton tile config (no %s)" % ", ".join(missing)
        used = [k for k in HARNESS_ONLY if config.get(k)]
        if used:
            return "uses %s, which aiter's Triton GEMM does not have" % ", ".join(used)
        if kernel == "fp8_blockscale" and config.get("BLOCK_K") != 128:
            return "has BLOCK_K %s (aiter's gemm_a8w8_blockscale asserts BLOCK_SIZE_K == 128)" % config.get("BLOCK_K")
        return None
    return accept


def key_for(M: int) -> str:
    """The key aiter's lookup finds first for M among keys at every bound (never 'any')."""
    for bound in BOUNDS:
        if M <= bound:
            return "M_LEQ_%d" % bound
    return "M_GEQ_%d" % BOUNDS[-1]


def lookup(configs: dict, M: int) -> tuple:
    """(config, is_tuned) exactly as aiter's ``_get_gemm_config_cached`` picks it from one file."""
    for bound in BOUNDS:
        key = "M_LEQ_%d" % bound
        if M <= bound and key in configs:
            return configs[key], True
    for bound in reversed(BOUNDS):
        key = "M_GEQ_%d" % bound
        if M >= bound and key in configs:
            return configs[key], True
    if "any" in configs:
        return configs["any"], False
    raise KeyError("no config for M=%d" % M)


def pick_config(configs: dict, M: int) -> dict:
    """The config aiter uses for M (see ``lookup``)."""
    return lookup(configs, M)[0]


def file_name(arch: str, family: str, N: Optional[int] = None, K: Optional[int] = None) -> str:
    if N is None:
        return "%s-%s.json" % (arch, family)
    return "%s-%s-N=%d-K=%d.json" % (arch, family, N, K)


def to_triton(config: dict) -> tuple:
    """(aiter config, keys filled with neutral values) of a harness config."""
    out = {JSON_NAMES.get(k, k): v for k, v in config.items() if k not in HARNESS_ONLY}
    filled = [k for k in REQUIRED if k not in out]
    for k in filled:
        out[k] = REQUIRED[k]
    return out, filled


def write_triton_json(df: pd.DataFrame, best: Optional[pd.DataFrame], meta, out_dir, tag: Optional[str] = None,
                      say: Callable[[str], None] = say_default) -> list:
    """Write one JSON per (family, N, K) into ``out_dir`` and one default file per family into
    ``out_dir/default``. ``tag`` replaces the family name (``GEMM-<tag>``). Returns the paths
    written (default files last); raises HarnessError when no shape is left (never 0 files)."""
    meta = Meta.coerce(meta, df)
    if not meta.arch:
        raise HarnessError("the Triton JSON file names start with the arch: give the metadata an arch")
    kernels = kernel_rows(df)
    if not len(kernels[kernels["status"] == OK]):
        raise HarnessError("no shape has an ok kernel result: nothing to write to Triton JSON")
    families = {}
    for (kernel, dtype, layout), group in kernels.groupby(["kernel", "dtype", _layouts(kernels["layout"])], sort=True):
        family, why = family_of(kernel, dtype, layout)
        if family is None:
            for shape_id in sorted(set(group["shape_id"])):
                say("triton: %s left out: %s" % (shape_id, why))
            continue
        families.setdefault(("GEMM-%s" % tag) if tag else family, []).append(group.index)
    out_dir = Path(out_dir)
    written, defaults = [], []
    for family, parts in families.items():
        sub = df.loc[[i for p in parts for i in p]]
        kernel = str(sub["kernel"].iloc[0])
        top = pick_rows(sub, None if best is None else best[best["shape_id"].isin(set(sub["shape_id"]))],
                        accept_for(kernel), "triton", say)
        if top.empty:
            continue
        accept = accept_for(kernel)
        ok = kernel_rows(sub[sub["status"] == OK])
        ok = ok[[accept(config_of(r)) is None for _, r in ok.iterrows()]]
        docs = []
        for (N, K), group in top.groupby(["N", "K"], sort=True):
            group = _one_dtype(group, family, say)
            cands = ok[(ok["N"] == N) & (ok["K"] == K) & (ok["dtype"] == group["dtype"].iloc[0])]
            doc = _doc(group, cands, meta, family, int(N), int(K))
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / file_name(meta.arch, family, int(N), int(K))
            path.write_text(json.dumps(doc, indent=4) + "\n")
            written.append(path)
            docs.append(doc)
        defaults.append(_write_default(out_dir / DEFAULT_DIR, meta, family, docs))
    if not written:
        raise HarnessError("no shape is left for aiter's Triton JSON (see the lines above): 0 files written")
    return written + defaults


def read_triton_json(path) -> dict:
    """A config file back, without the ``_harness`` entry."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HarnessError("malformed JSON: %s" % exc.msg, where="%s:%d" % (path, exc.lineno))
    return {k: v for k, v in data.items() if k != META_KEY}


def _doc(best_rows: pd.DataFrame, cands: pd.DataFrame, meta: Meta, family: str, N: int, K: int) -> dict:
    """One (N, K) file: a key per bound a tuned M falls under, an M_GEQ at the largest, ``any``."""
    by_key = defaultdict(list)
    for _, row in best_rows.iterrows():
        by_key[key_for(int(row["M"]))].append(row)
    doc, tuned_ms, filled = {}, {}, set()
    ordered = sorted(by_key, key=_key_order)
    for key in ordered:
        cfg, fill = to_triton(_bucket_config(by_key[key], cands))
        doc[key] = cfg
        filled.update(fill)
        tuned_ms[key] = sorted(int(r["M"]) for r in by_key[key])
    leq = [k for k in ordered if k.startswith("M_LEQ_")]
    if leq:  # M above the largest M_LEQ bound: its config, found by M_GEQ at that bound
        geq = "M_GEQ_%s" % leq[-1][len("M_LEQ_"):]
        doc.setdefault(geq, doc[leq[-1]])
    doc["any"] = doc[ordered[-1]]
    doc[META_KEY] = dict(meta.as_dict(), family=family, N=N, K=K, tuned_M=tuned_ms, filled=sorted(filled),
                         dtype=str(best_rows["dtype"].iloc[0]), layout=str(_layouts(best_rows["layout"]).iloc[0]))
    return doc


def _one_dtype(group: pd.DataFrame, family: str, say) -> pd.DataFrame:
    """aiter names one file per (family, N, K) whatever the dtype: keep the first dtype's rows."""
    dtypes = sorted(set(group["dtype"]))
    if len(dtypes) > 1:
        for shape_id in sorted(set(group.loc[group["dtype"] != dtypes[0], "shape_id"])):
            say("triton: %s left out: aiter's %s file for this N, K holds %s configs (one file per N, K)"
                % (shape_id, family, dtypes[0]))
    return group[group["dtype"] == dtypes[0]]


def _layouts(series: pd.Series) -> pd.Series:
    """Layouts as text; a kernel without layouts (fp8_blockscale) has empty cells, read as NaN."""
    return series.astype(object).where(series.notna(), "").astype(str)


def _key_order(key: str) -> tuple:
    return (key.startswith("M_GEQ_"), int(key.rsplit("_", 1)[1]))


def _write_default(folder: Path, meta: Meta, family: str, docs: list) -> Path:
    default = {}
    keys = sorted({k for d in docs for k in d if k.startswith("M_")}, key=_key_order)
    for k in keys + ["any"]:
        counts = Counter(json.dumps(d[k], sort_keys=True) for d in docs if k in d)
        if counts:
            default[k] = json.loads(counts.most_common(1)[0][0])
    default[META_KEY] = dict(meta.as_dict(), family=family, default=True,
                             files=[file_name(meta.arch, family, d[META_KEY]["N"], d[META_KEY]["K"]) for d in docs])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(meta.arch, family)
    path.write_text(json.dumps(default, indent=4) + "\n")
    return path


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
