"""One-off probe (issue 43): where the seconds of a GPU tune on a node go, from the files it leaves.

Runs `harness tune matmul --budget 96 --min-time-ms 25` on the ten shapes of
bench/shapes/llm_gemms.txt in a fresh project on the first N GPUs of the node (the target of
bench/_node_env.sh, an empty compile cache), stamping each line of the tune's output with the
seconds since it started, then reads the agent's serve folder: when each round was queued
(.json), joined the stream (.start) and was done (.done), and serve.log's timed lines (workers
ready). Prints a timeline in 2-second buckets (rounds queued, rounds done, the busy share of all cores
and the cores the tune's and the agent's processes used) and the first events; writes everything to OUT/timeline.json.

    python3 bench/probes/stream_timeline.py OUT --gpus 4      (on the node, from the repository root)
"""

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def sample_cpu(samples: list, stop: threading.Event, pids: dict, every: float = 0.25) -> None:
    """(wall clock, busy share of all cores, {name: cores used by that process}) every ``every``
    seconds, from /proc/stat and /proc/PID/stat; ``pids``: {name: pid or a callable giving it},
    filled as the processes start (the tune's own process near 1.0: bound by its GIL)."""
    tick = os.sysconf("SC_CLK_TCK")

    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]

    def process(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        except (OSError, ValueError, IndexError):
            return None

    last, last_t, used = read(), time.time(), {}
    while not stop.wait(every):
        now, t = read(), time.time()
        total, idle = now[0] - last[0], now[1] - last[1]
        cores = {}
        for name, pid in list(pids.items()):
            pid = pid() if callable(pid) else pid
            seconds = process(pid) if pid else None
            if seconds is not None and name in used:
                cores[name] = round((seconds - used[name]) / (t - last_t), 2)
            if seconds is not None:
                used[name] = seconds
        samples.append((t, round(1 - idle / total, 3) if total else 0.0, cores))
        last, last_t = now, t


def pid_file(path: Path):
    """A callable: the pid in ``path`` once it is there."""
    def read():
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
    return read


def compile_events(project: Path, start: float) -> list:
    """(done s, compile seconds, status) of each artifact the tune compiled, from the sidecars."""
    out = []
    for side in project.glob("build/**/artifacts/*.json"):
        try:
            data = json.loads(side.read_text())
        except (OSError, ValueError):
            continue
        out.append((round(side.stat().st_mtime - start, 3), round(data.get("seconds", 0.0), 3),
                    data.get("status"), bool(data.get("cached"))))
    return sorted(out)


def run_tune(project: Path, gpus: int, cache: Path, log: Path, pids: dict) -> float:
    """The tune, its output lines stamped; returns its start (wall clock). Its pid goes to
    ``pids["tune"]``."""
    devices = ",".join(str(i) for i in range(gpus))
    subprocess.run(["bash", "-c", '. "%s/bench/_node_env.sh" && node_target targets.yaml %s'
                    % (REPO, devices)], cwd=project, check=True)
    env = dict(os.environ, HARNESS_CACHE_DIR=str(cache), PYTHONUNBUFFERED="1", COLUMNS="160",
               PYTHONPATH="/tmp/site:%s" % REPO)
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "harness", "tune", "matmul", "--target", "node", "--shapes-file",
                             str(REPO / "bench/shapes/llm_gemms.txt"), "--budget", "96", "--min-time-ms", "25"],
                            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids["tune"] = proc.pid
    with open(log, "w") as out:
        for line in proc.stdout:
            out.write("%7.2f %s" % (time.time() - start, line))
    proc.wait()
    return start


def queue_events(serve: Path, start: float) -> list:
    """(round, queued s, joined s, done s, rows, seconds, busy) per round, from the file times."""
    out = []
    queue = serve / "queue"
    for js in sorted(queue.glob("*.json")):
        name = js.name[:-5]
        done = queue / (name + ".done")
        started = queue / (name + ".start")
        info = json.loads(done.read_text()) if done.exists() else {}
        spec = json.loads(js.read_text())
        out.append({"round": name, "queued": js.stat().st_mtime - start,
                    "joined": started.stat().st_mtime - start if started.exists() else None,
                    "done": done.stat().st_mtime - start if done.exists() else None,
                    "jobs": len(spec["manifest"].get("jobs", [])), "pin": spec.get("pin"),
                    "rows": info.get("rows"), "busy": info.get("busy")})
    return out


def serve_lines(serve: Path, start: float) -> list:
    """serve.log's timed lines as (seconds since the tune began, text)."""
    out = []
    day = datetime.fromtimestamp(start).strftime("%Y-%m-%d ")
    for line in (serve / "serve.log").read_text().splitlines():
        m = re.match(r"agent (\d\d:\d\d:\d\d\.\d{3}): (.*)", line)
        if m:
            t = datetime.strptime(day + m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
            out.append((round(t - start, 3), m.group(2)))
    return out


def buckets(events: list, width: float = 2.0) -> list:
    """Per ``width`` seconds: rounds queued (and their jobs), rounds done."""
    table = {}
    for e in events:
        for key in ("queued", "done"):
            if e[key] is not None:
                table.setdefault(int(e[key] // width), {"queued": 0, "done": 0, "jobs_queued": 0})[key] += 1
                if key == "queued":
                    table[int(e[key] // width)]["jobs_queued"] += e["jobs"]
    return [dict(t=k * width, **v) for k, v in sorted(table.items())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--gpus", type=int, default=4)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        project, cache = Path(tmp) / "project", Path(tmp) / "cache"
        project.mkdir()
        cache.mkdir()
        log = out / ("tune-gpus%d.log" % args.gpus)
        cpu, stop = [], threading.Event()
        pids = {"agent": pid_file(project / "results" / "node" / "matmul" / "serve" / "serve.pid")}
        sampler = threading.Thread(target=sample_cpu, args=(cpu, stop, pids), daemon=True)
        sampler.start()
        start = run_tune(project, args.gpus, cache, log, pids)
        stop.set()
        compiles = compile_events(project, start)
        serve = project / "results" / "node" / "matmul" / "serve"
        events = queue_events(serve, start)
        lines = serve_lines(serve, start)
        with open(project / "results" / "node" / "matmul" / "results.csv", newline="") as f:
            rows = [{"device": r["device"], "shape": r["shape_id"], "variant": r["variant_id"],
                     "timestamp": r["timestamp"], "samples": r["samples"]} for r in csv.DictReader(f)]
        record = {"gpus": args.gpus, "rounds": events, "serve_log": lines, "rows": rows,
                  "buckets": buckets(events),
                  "cpu": [(round(t - start, 2), b, cores) for t, b, cores in cpu], "compiles": compiles}
        (out / ("timeline-gpus%d.json" % args.gpus)).write_text(json.dumps(record, indent=1))
    first = lambda key: min((e[key] for e in events if e[key] is not None), default=None)  # noqa: E731
    print("gpus %d: first round queued %.2f s, joined %.2f s, done %.2f s; %d rounds" % (
        args.gpus, first("queued"), first("joined"), first("done"), len(events)))
    for t, text in lines:
        if "ready" in text or "serving" in text:
            print("  %7.2f %s" % (t, text[:150]))
    for b in record["buckets"]:
        inside = [c for c in record["cpu"] if b["t"] <= c[0] < b["t"] + 2.0]
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        print("  %5.1f s: %3d rounds queued (%4d jobs), %3d done; all cores %3.0f %%, the tune's process %.2f "
              "cores, the agent's %.2f" % (b["t"], b["queued"], b["jobs_queued"], b["done"],
                                           100 * mean([c[1] for c in inside]),
                                           mean([c[2].get("tune", 0.0) for c in inside]),
                                           mean([c[2].get("agent", 0.0) for c in inside])))
    print(open(log).read()[-1500:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
