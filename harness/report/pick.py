"""The row each consumer's file gets per shape: the tuned best where the consumer's kernel can run
its config, else the fastest measured config it can run, else nothing (and a line that says so).

A consumer's kernel is not the harness's: aiter's Triton fp8 GEMM needs BLOCK_SIZE_K equal to the
128-wide scale block, vLLM's block-fp8 kernel has no split-K and no tensor descriptors, tune_gemm's
kernel has none of the harness's NVIDIA-only switches. Writing the harness's best config where the
consumer cannot express it would be a file that silently runs something else; so each writer
passes ``accept(config) -> None | reason`` and this module picks per shape.
"""

from __future__ import annotations

from typing import Callable, Optional

import pandas as pd

from remote_agent.contract import OK

from .common import config_of, deciding_time, deciding_times, kernel_name, kernel_rows, shape_order, tuned_best

Accept = Callable[[dict], Optional[str]]


def say_default(line: str) -> None:
    """Print a writer's note on stderr (the CLI's console), one line each."""
    from ..ui import console

    console.print(line, markup=False, highlight=False, soft_wrap=True, style="yellow")


def pick_rows(df: pd.DataFrame, best: Optional[pd.DataFrame], accept: Accept, what: str,
              say: Callable[[str], None]) -> pd.DataFrame:
    """Per shape of ``tuned_best(df, best)``: that row where ``accept`` takes its config; else the
    fastest ok kernel row of the shape that ``accept`` takes (said in one line with the cost);
    else no row (said in one line). ``what`` names the consumer in those lines."""
    top = tuned_best(df, best)
    if top.empty:
        return top
    ok = kernel_rows(df[df["status"] == OK])
    rows = []
    for _, row in top.iterrows():
        reason = accept(config_of(row))
        if reason is None:
            rows.append(row)
            continue
        cands = ok[ok["shape_id"] == row["shape_id"]]
        cands = cands.assign(_t=deciding_times(cands)).sort_values("_t", kind="stable")
        fit = next((c for _, c in cands.iterrows() if accept(config_of(c)) is None), None)
        if fit is None:
            say("%s: %s left out: its best config %s %s, and no measured config fits" % (
                what, row["shape_id"], kernel_name(row["kernel"], config_of(row)), reason))
            continue
        slower = deciding_time(fit) / deciding_time(row) - 1.0
        say("%s: %s gets %s (%.1f %% slower than the best, %s, which %s)" % (
            what, row["shape_id"], kernel_name(fit["kernel"], config_of(fit)), 100.0 * slower,
            kernel_name(row["kernel"], config_of(row)), reason))
        rows.append(fit.drop(labels=["_t"]))
    if not rows:
        return top.iloc[0:0].copy()
    out = pd.DataFrame(rows)
    return out.sort_values(shape_order(df), kind="stable").reset_index(drop=True)


def is_power_of_two(n) -> bool:
    n = int(n)
    return n >= 1 and not n & (n - 1)
