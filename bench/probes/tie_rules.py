"""How often do two re-measures of the same candidates agree, under each tie rule?

    python3 -m bench.probes.tie_rules [--shape 128x128x128] [--configs "C1;C2;..."] [--trials 20] [--repeats 5]

Builds the candidates (matmul configs, ``NAME=VALUE,...`` separated by ``;``; default: the three
tiles the README tunes' winners on 128x128x128 came from) for the ``local`` target and re-measures
them ``--trials`` times as harness tune does: ``--repeats`` agent runs, each measuring every
candidate interleaved, and as many again. Each trial's first ``--repeats`` are judged by
strategies/winner.py's ``pick_winner`` with every tie rule (``core``, the default; ``id``;
``spread``) and by ``leader`` (the fastest time wins a tie, not a rule of winner.py); ``tune`` is
what harness tune decides: ``core``, on all the repeats where the first ones leave the winner
unsure (strategies/winner.py ``Winner.unsure``: noise over 2 %, or a tie won 1 % or more behind
the fastest). It prints each trial's times and winners, then per
rule how many trials each candidate won and how many pairs of trials agree (the same winner, or
each winner among the other's tied candidates: bench/tune_repeat.py's test).
"""

import argparse
import collections
import csv
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile

from bench.cpu_noise import ROOT, build_space, parse_config
from harness.strategies.history import row_trial
from harness.strategies.winner import pick_winner

CONFIGS = "BLOCK_M=64,BLOCK_N=32,BLOCK_K=8,GROUP_M=1;BLOCK_M=64,BLOCK_N=32,BLOCK_K=8,GROUP_M=8;" \
          "BLOCK_M=64,BLOCK_N=128,BLOCK_K=128,GROUP_M=8"
RULES = ("core", "id", "spread", "leader", "tune")


def build(work, shape, configs, env):
    """A bundle whose space covers ``configs``; (bundle, {variant id: label}, job indices to run)."""
    names = list(configs[0])
    bundle = build_space(work, shape, env, {n: sorted({c[n] for c in configs}) for n in names}, library=False)
    with open(os.path.join(bundle, "manifest.json")) as f:
        manifest = json.load(f)
    labels, jobs = {}, []
    for v in manifest["variants"]:
        if {k: v["config"].get(k) for k in names} in configs:
            labels[v["id"]] = "%dx%dx%d G%d" % tuple(v["config"][k]
                                                     for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"))
    for i, job in enumerate(manifest["jobs"]):
        if job["variant"] in labels:
            jobs.append(i)
    return bundle, labels, jobs


def remeasure(bundle, jobs, repeats, work, trial, env):
    """{variant id: [Trial, ...]}: ``repeats`` agent runs of the jobs, interleaved."""
    samples = collections.defaultdict(list)
    for r in range(repeats):
        out = os.path.join(work, "t%d_%d.csv" % (trial, r))
        subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", bundle, "--results", out, "--all",
                        "--select", ",".join(str(j) for j in jobs)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            for row in csv.DictReader(f):
                if row["status"] == "ok":
                    samples[row["variant_id"]].append(row_trial(row))
    return samples


def decide(samples, rule, repeats):
    """(winner id, tied ids) under ``rule``, from the first ``repeats`` of ``samples`` (``tune``:
    all of them where those leave the winner unsure)."""
    first = {cid: trials[:repeats] for cid, trials in samples.items()}
    if rule == "tune":
        w = pick_winner(samples if pick_winner(first).unsure else first)
        return w.id, set(w.tied)
    w = pick_winner(first, tie_rule="core" if rule == "leader" else rule)
    return (w.leader if rule == "leader" else w.id), set(w.tied)


def agree(a, b):
    return a[0] == b[0] or (a[0] in b[1] and b[0] in a[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="128x128x128")
    p.add_argument("--configs", default=CONFIGS)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    work = tempfile.mkdtemp(prefix="tie-rules-")
    try:
        bundle, labels, jobs = build(work, args.shape, [parse_config(c) for c in args.configs.split(";")], env)
        outcomes = {rule: [] for rule in RULES}
        for t in range(args.trials):
            samples = remeasure(bundle, jobs, 2 * args.repeats, work, t, env)
            table = pick_winner({cid: trials[:args.repeats] for cid, trials in samples.items()}).table
            for rule in RULES:
                outcomes[rule].append(decide(samples, rule, args.repeats))
            print("trial %2d  %s  | %s" % (t, "  ".join("%s=%.0f ns (spread %.1f %%)" % (
                labels[c.id], c.median, 100 * c.spread / c.median) for c in table),
                " ".join("%s:%s" % (rule, labels[outcomes[rule][-1][0]]) for rule in RULES)), flush=True)
        pairs = args.trials * (args.trials - 1) // 2
        for rule in RULES:
            wins = collections.Counter(labels[o[0]] for o in outcomes[rule])
            agreeing = sum(agree(a, b) for a, b in itertools.combinations(outcomes[rule], 2))
            print("%-7s wins: %s;  pairs of trials agreeing: %d of %d" % (
                rule, ", ".join("%s %d" % kv for kv in wins.most_common()), agreeing, pairs))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
