"""The summary of bench/gpu_scaling.sh: one line per tune, then the ratios to the one-GPU run.

    python3 bench/scaling_summary.py OUT RUN...

Each RUN is a folder OUT/RUN with the tune's ``tune.log`` (its "tune wall time" line),
``tune_timing.json`` (harness.tune_timing: phases, each device's busy seconds, configs,
compiles) and, where the quality bench ran, ``quality.json`` (bench/gpu_quality.py: the geomean
cuBLAS/Triton speed ratio). A RUN named gpusN measures on N GPUs; gpusN-cached is a second tune
keeping the compile cache of the run before it. Issue 43's goals are printed beside the ratios.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

PHASES = ("search", "re-measure")


def read_run(folder: Path) -> dict:
    """What one tune left in ``folder`` (missing files leave their numbers None)."""
    run = {"name": folder.name, "wall": None, "timing": None, "geomean": None, "no_ok": []}
    log = folder / "tune.log"
    if log.exists():
        text = log.read_text(errors="replace")
        found = re.findall(r"tune wall time: ([\d.]+) s end to end", text)
        run["wall"] = float(found[-1]) if found else None
        missing = re.findall(r"^no ok config for: (.*)$", text, re.M)
        run["no_ok"] = missing[-1].split(", ") if missing else []
    for name, key in (("tune_timing.json", "timing"), ("quality.json", "quality")):
        try:
            run[key] = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            run[key] = None
    quality = run.pop("quality", None)
    if quality:
        run["geomean"] = (quality.get("summary") or {}).get("geomean_ratio")
    return run


def busy(timing: dict, phases=PHASES) -> float:
    """The devices' mean busy share over ``phases`` (their busy seconds over the phases' wall)."""
    wall = sum((timing.get("phases") or {}).get(p, 0.0) for p in phases)
    devices = timing.get("devices") or {}
    if not devices or wall <= 0:
        return float("nan")
    return sum(sum(d.get(p, 0.0) for p in phases) for d in devices.values()) / (len(devices) * wall)


def row(run: dict) -> dict:
    t = run["timing"] or {}
    search = t.get("search") or {}
    return {"run": run["name"], "gpus": len(t.get("devices") or {}) or None, "wall": run["wall"],
            "search_s": (t.get("phases") or {}).get("search"), "remeasure_s": (t.get("phases") or {}).get("re-measure"),
            "configs": t.get("configs"), "rate": search.get("configs_per_s"), "pruning_s": search.get("pruning_s"),
            "busy": busy(t), "busy_search": busy(t, ("search",)), "busy_remeasure": busy(t, ("re-measure",)),
            "compiled": (t.get("compiles") or {}).get("compiled"), "reused": (t.get("compiles") or {}).get("reused"),
            "geomean": run["geomean"], "no_ok": run.get("no_ok") or []}


def _f(value, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt % value


def report(rows: list) -> list:
    lines = ["%-14s %4s %8s %8s %7s %10s %7s %9s %13s %13s %13s %9s %7s %8s %9s" % (
        "run", "GPUs", "wall s", "search s", "prune s", "re-meas. s", "configs", "configs/s", "busy measuring",
        "busy search", "busy re-meas.", "compiled", "reused", "x 1 GPU", "geomean")]
    one = next((r for r in rows if r["run"] == "gpus1"), None)
    for r in rows:
        ratio = r["wall"] / one["wall"] if one and r["wall"] and one["wall"] else None
        lines.append("%-14s %4s %8s %8s %7s %10s %7s %9s %13s %13s %13s %9s %7s %8s %9s" % (
            r["run"], _f(r["gpus"], "%d"), _f(r["wall"], "%.1f"), _f(r["search_s"], "%.1f"), _f(r["pruning_s"], "%.1f"),
            _f(r["remeasure_s"], "%.1f"), _f(r["configs"], "%d"), _f(r["rate"], "%.1f"),
            _f(100 * r["busy"], "%.0f %%"), _f(100 * r["busy_search"], "%.0f %%"),
            _f(100 * r["busy_remeasure"], "%.0f %%"), _f(r["compiled"], "%d"), _f(r["reused"], "%d"),
            _f(ratio, "%.3f"), _f(r["geomean"], "%.3f")))
    if one and one["wall"]:
        goals = {"gpus2": 0.55, "gpus4": 1.0 / 3.0}
        for r in rows:
            if r["run"] in ("gpus2", "gpus4", "gpus8") and r["wall"]:
                goal = goals.get(r["run"])
                lines.append("%s: wall time %.3f of one GPU's (speedup x%.2f)%s" % (
                    r["run"], r["wall"] / one["wall"], one["wall"] / r["wall"],
                    "; goal at most %.3f: %s" % (goal, "met" if r["wall"] / one["wall"] <= goal else "NOT met")
                    if goal else ""))
        lines.append("gpus1: devices busy %s of the measuring phases (goal 85 %%)" % _f(100 * one["busy"], "%.0f %%"))
        four = next((r for r in rows if r["run"] == "gpus4"), None)
        if four:
            lines.append("gpus4: devices busy %s of the measuring phases (goal 75 %%)" % _f(100 * four["busy"], "%.0f %%"))
            if four["geomean"] and one["geomean"]:
                diff = four["geomean"] / one["geomean"] - 1.0
                lines.append("geomean vs cuBLAS: 4 GPUs %.3f, 1 GPU %.3f, %+.1f %% (goal within 2 %%: %s)" % (
                    four["geomean"], one["geomean"], 100 * diff, "met" if abs(diff) <= 0.02 else "NOT met"))
    for r in rows:
        if r["no_ok"]:  # a shape measured nothing: the run's times and ratios leave its work out
            lines.append("%s: NOT comparable: %d shape(s) without an ok config (%s)" % (
                r["run"], len(r["no_ok"]), ", ".join(r["no_ok"])))
    for r in rows:
        if r["run"].endswith("-cached"):
            lines.append("%s (a second tune, the compile cache kept): %s compiled, %s reused%s" % (
                r["run"], _f(r["compiled"], "%d"), _f(r["reused"], "%d"),
                " (goal: compiles nothing)" if r["compiled"] else " (compiles nothing: goal met)"))
    return lines


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    rows = [row(read_run(out / name)) for name in argv[1:]]
    print("\n".join(report(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
