"""A run on a Slurm cluster: the pushed bundle's jobs split in chunks (``fleet.chunks_of``), one
job array with a task per chunk, followed from the login node until every chunk is done. A
chunk whose task died (failed, preempted, cancelled, out of time) is submitted again and
resumes from its own results file: nothing is lost and nothing is measured twice.

In the cluster's shared folder (``slurm.shared_dir``, else the target's ``workdir``):
    results/<target>/<kernel>/slurm/current               the id of the latest run
    results/<target>/<kernel>/slurm/<run>/run.json        its chunks, agent options, arrays
    results/<target>/<kernel>/slurm/<run>/chunk-N.csv     chunk N's rows; beside it .exit (the agent's
                                                          exit code) and .device.json (the node's facts)
    results/<target>/<kernel>/slurm/<run>/logs/           <array>_<task>.out and .err
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import shlex
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from remote_agent.contract import PROGRESS_PREFIX

from .. import ui
from ..errors import HarnessError
from ..push import remote_bundle_dir, remote_results_dir
from .slurm_batch import EXIT_SUFFIX, sbatch_argv, submit_command, task_script
from .slurm_queue import TaskState, parse_queued, queued_command, read_logs, read_states

# exit codes of a task's agent that running it again will not change: something to fix (2), no
# such command (127) or not executable (126)
FATAL_EXITS = ("2", "126", "127")
STATE_FILE = "run.json"
_ID_MARK = "@@job-id@@"


@dataclass
class Run:
    id: str
    chunks: list  # [[job index, ...], ...]
    options: dict  # RunOptions fields the tasks run with (select and rerun_all apart)
    rerun_all: bool
    arrays: list = field(default_factory=list)  # [{"job": id, "chunks": [chunk of task 0, ...]}]

    def attempts(self, chunk: int) -> int:
        return sum(a["chunks"].count(chunk) for a in self.arrays)

    def task_chunk(self, job: str, task: int):
        for a in self.arrays:
            if a["job"] == job and task < len(a["chunks"]):
                return a["chunks"][task]
        return None

    def latest_tasks(self) -> dict:
        """{chunk: (job, task)} of each chunk's latest array task."""
        out = {}
        for a in self.arrays:
            for task, chunk in enumerate(a["chunks"]):
                out[chunk] = (a["job"], task)
        return out


def slurm_dir(target: str, kernel: str) -> str:
    return "%s/slurm" % remote_results_dir(target, kernel)


def run_dir(target: str, kernel: str, run_id: str) -> str:
    return "%s/%s" % (slurm_dir(target, kernel), run_id)


def chunk_results(target: str, kernel: str, run_id: str, chunk: int) -> str:
    return "%s/chunk-%d.csv" % (run_dir(target, kernel, run_id), chunk)


# ---- run ----------------------------------------------------------------------------------


def run_array(transport, target, kernel: str, options, on_progress=None) -> str:
    """Submit the bundle's jobs as a job array (or attach to the run in progress), follow it,
    submit again what died, until every chunk is done. Returns the run's folder."""
    from remote_agent.agent import parse_select

    from ..fleet import chunks_of

    keys = job_keys(transport, target.name, kernel)
    run = load_current(transport, target.name, kernel)
    if run is not None and _poll(transport, run, target.name, kernel)[0]:
        ui.console.print("attaching to the Slurm run in progress (%s, arrays %s)"
                         % (run.id, ", ".join(a["job"] for a in run.arrays)))
    else:
        chosen = parse_select(options.select, len(keys))
        indices = [i for i in range(len(keys)) if chosen is None or i in chosen]
        if not options.rerun_all:
            done = measured_keys(transport, target.name, kernel)
            indices = [i for i in indices if keys[i] not in done]
        if not indices:
            ui.console.print("every job of %s on %s has a row already (--all measures again)" % (kernel, target.name))
            return remote_results_dir(target.name, kernel)
        opts = {k: v for k, v in dataclasses.asdict(options).items() if k not in ("select", "rerun_all")}
        run = Run(time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6],
                  chunks_of(indices, target.slurm.tasks, per_host=1), opts, options.rerun_all)
        submit(transport, target, kernel, run, list(range(len(run.chunks))))
    follow(transport, target, kernel, run, keys, on_progress)
    return run_dir(target.name, kernel, run.id)


def submit(transport, target, kernel: str, run: Run, chunks: list) -> str:
    """One job array, task N running chunk ``chunks[N]``; the run's state file names it."""
    from ..devinfo import PROBE
    from ..fleet import compact
    from ..run import AGENT_PYTHON_FLAGS, RunOptions, agent_args

    arms = []
    for c in chunks:
        results = chunk_results(target.name, kernel, run.id, c)
        opts = RunOptions(**run.options, select=compact(run.chunks[c]))
        argv = [transport.python] + AGENT_PYTHON_FLAGS + ["-m", "remote_agent", "run"] + agent_args(
            remote_bundle_dir(target.name, kernel), results, opts) + ["--pushed"]
        arms.append((results, argv))
    folder = run_dir(target.name, kernel, run.id)
    state = _state_json(dataclasses.replace(run, arrays=run.arrays + [{"job": _ID_MARK, "chunks": chunks}]))
    before, _, after = state.partition(_ID_MARK)
    command = submit_command(
        transport.workdir, task_script(arms, run.rerun_all, PROBE),
        sbatch_argv(target.slurm, "harness-%s-%s" % (target.name, kernel), len(chunks), folder + "/logs"),
        folder + "/logs", "%s/%s" % (folder, STATE_FILE), before, after,
        remove=[r + EXIT_SUFFIX for r, _ in arms], current=("%s/current" % slurm_dir(target.name, kernel), run.id))
    rc, out, err = transport.run_capture(command)
    job = out.decode("utf-8", "replace").strip().splitlines()[-1:] if rc == 0 else []
    if rc != 0 or not job or not job[0].isdigit():
        raise HarnessError("sbatch on %s refused the array: %s" % (transport.label, _last(err) or "exit %d" % rc))
    run.arrays.append({"job": job[0], "chunks": list(chunks)})
    return job[0]


def follow(transport, target, kernel: str, run: Run, keys: list, on_progress=None) -> None:
    """Look at the queue every ``slurm.poll`` seconds; when no task of the run is queued or
    running, settle: done, or the unfinished chunks submitted again (``slurm.retries`` times)."""
    from ..run import ProgressBar

    total = sum(len(c) for c in run.chunks)
    with ui.progress() as bar:
        show = on_progress or ProgressBar(bar, "%s (Slurm)" % target.name)
        try:
            while True:
                live, done = _poll_patiently(transport, run, target.name, kernel)
                if done is not None:
                    show({"done": min(done, total), "total": total, "status": None})
                if not live and not resubmit_unfinished(transport, target, kernel, run, keys):
                    show({"done": total, "total": total, "status": None})
                    return
                time.sleep(target.slurm.poll)
        except KeyboardInterrupt:
            ui.console.print("the arrays (%s) go on in Slurm: `harness run --remote %s` follows them again, "
                             "scancel stops them" % (", ".join(a["job"] for a in run.arrays), target.name))
            raise


def _poll_patiently(transport, run: Run, target: str, kernel: str, tries: int = 5) -> tuple:
    """``_poll``, forgiving a few failures of squeue in a row (a busy controller); a dropped
    SSH connection ends the follow (the arrays go on)."""
    from ..run import ConnectionLost

    for attempt in range(tries):
        try:
            return _poll(transport, run, target, kernel)
        except HarnessError as exc:
            if attempt == tries - 1:
                raise
            ui.console.print("%s; trying again" % exc, markup=False)
            time.sleep(1.0)
        except Exception as exc:
            if isinstance(exc, (OSError, EOFError)) or type(exc).__module__.startswith("paramiko"):
                raise ConnectionLost("lost the connection to %s (%s); the arrays go on in Slurm: `harness run "
                                     "--remote` follows them again" % (transport.label, exc))
            raise


def resubmit_unfinished(transport, target, kernel: str, run: Run, keys: list) -> bool:
    """Every chunk without its agent's exit code 0 goes into one new array (its task resumes
    the chunk's results file). Returns False when every chunk is done."""
    chunks = chunk_outcomes(transport, target.name, kernel, run, keys)
    unfinished = {c: o for c, o in chunks.items() if o["exit"] != "0"}
    if not unfinished:
        return False
    latest = run.latest_tasks()
    states = read_states(transport, sorted({latest[c][0] for c in unfinished}))
    tasks = {c: states.get(latest[c]) for c in unfinished}
    logs = read_logs(transport, run_dir(target.name, kernel, run.id) + "/logs", [t for t in tasks.values() if t])
    again, fatal = [], []
    for c, outcome in sorted(unfinished.items()):
        task = tasks[c]
        said = "%s_%d %s" % (latest[c][0], latest[c][1], _ended(task, outcome["exit"]))
        lines = logs.get(task.name, []) if task else []
        ui.console.print("[yellow]array task %s (chunk %d): %d of %d jobs without a row[/]"
                         % (said, c, outcome["missing"], len(run.chunks[c])))
        for line in lines:
            ui.console.print("    " + line, markup=False, highlight=False)
        if outcome["exit"] in FATAL_EXITS:
            fatal.append("the agent of chunk %d exited %s: %s" % (c, outcome["exit"], _agent_error(lines)))
        elif run.attempts(c) > target.slurm.retries:
            hint = " (raise slurm.time or slurm.tasks)" if task and task.state == "TIMEOUT" else ""
            fatal.append("chunk %d did not finish in %d tries (%s)%s" % (c, run.attempts(c), said, hint))
        else:
            again.append(c)
    if fatal:
        more = " (and %d more chunks)" % (len(fatal) - 1) if len(fatal) > 1 else ""
        raise HarnessError("%s%s; the rows measured are kept: `harness report` fetches them" % (fatal[0], more))
    job = submit(transport, target, kernel, run, again)
    ui.console.print("[yellow]submitted chunk%s %s again as array %s[/]"
                     % ("s" if len(again) > 1 else "", ", ".join(map(str, again)), job))
    return True


# ---- what the cluster holds ------------------------------------------------------------------


def job_keys(transport, target: str, kernel: str) -> list:
    """(variant, shape) of every job of the pushed manifest, in job-index order."""
    path = "%s/manifest.json" % remote_bundle_dir(target, kernel)
    rc, out, err = transport.run_capture("cd %s && cat %s" % (shlex.quote(transport.workdir or "."), shlex.quote(path)))
    if rc != 0:
        raise HarnessError("no bundle for %s on %s (%s); run: harness push %s" % (kernel, target, _last(err), target))
    try:
        jobs = json.loads(out.decode())["jobs"]
    except (ValueError, KeyError) as exc:
        raise HarnessError("unreadable manifest of %s on %s: %s; push again" % (kernel, target, exc))
    return [(j["variant"], j["shape"]) for j in jobs]


def load_current(transport, target: str, kernel: str):
    """The latest run's state, or None."""
    d = shlex.quote(slurm_dir(target, kernel))
    command = "cd %s && r=$(cat %s/current 2>/dev/null) && cat %s/\"$r\"/%s 2>/dev/null; true" % (
        shlex.quote(transport.workdir or "."), d, d, STATE_FILE)
    rc, out, err = transport.run_capture(command)
    if rc != 0:
        raise HarnessError("cannot read the Slurm run state on %s: %s" % (transport.label, _last(err)))
    if not out.strip():
        return None
    try:
        data = json.loads(out.decode())
        return Run(data["id"], data["chunks"], data["options"], data["rerun_all"], data["arrays"])
    except (ValueError, KeyError, TypeError) as exc:
        raise HarnessError("unreadable Slurm run state on %s: %s" % (transport.label, exc))


def measured_keys(transport, target: str, kernel: str) -> set:
    """(variant, shape) of every row in every run's results on the cluster."""
    with tempfile.TemporaryDirectory(prefix="harness-slurm-") as tmp:
        transport.fetch_tree(slurm_dir(target, kernel), Path(tmp))
        return {k for path in Path(tmp).rglob("chunk-*.csv") for k in _row_keys(path.read_text())}


def chunk_outcomes(transport, target: str, kernel: str, run: Run, keys: list) -> dict:
    """{chunk: {"exit": the agent's exit code or None, "missing": jobs without a row}}."""
    folder = run_dir(target, kernel, run.id)
    with tempfile.TemporaryDirectory(prefix="harness-slurm-") as tmp:
        transport.fetch_tree(folder, Path(tmp))
        out = {}
        for c, jobs in enumerate(run.chunks):
            results = Path(tmp) / chunk_results(target, kernel, run.id, c)
            measured = _row_keys(results.read_text()) if results.exists() else set()
            code = Path(str(results) + EXIT_SUFFIX)
            out[c] = {"exit": code.read_text().strip() if code.exists() else None,
                      "missing": sum(1 for i in jobs if keys[i] not in measured)}
        return out


def _row_keys(text: str) -> set:
    """(variant, shape) of the whole rows of a results file (a torn last line is not a row)."""
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return set()
    header = rows[0]
    if "variant_id" not in header or "shape_id" not in header:
        return set()
    v, s = header.index("variant_id"), header.index("shape_id")
    return {(r[v], r[s]) for r in rows[1:] if len(r) == len(header)}


def _poll(transport, run: Run, target: str, kernel: str) -> tuple:
    """(any task of the run queued or running, jobs done so far by the agents' progress)."""
    logs = shlex.quote(run_dir(target, kernel, run.id) + "/logs")
    command = "%s; echo \"@@logs $?\"; cd %s && for f in %s/*.out; do [ -f \"$f\" ] && tail -n 1 \"$f\"; done; true" % (
        queued_command(), shlex.quote(transport.workdir or "."), logs)
    rc, out, err = transport.run_capture(command)
    queued, _, tails = out.decode("utf-8", "replace").partition("@@logs ")
    squeue_rc, _, tails = tails.partition("\n")
    if rc != 0 or squeue_rc.strip() != "0":
        raise HarnessError("squeue failed on %s: %s" % (transport.label, _last(err) or "exit %s" % squeue_rc.strip()))
    live = bool(parse_queued(queued, {a["job"] for a in run.arrays}))
    done = 0
    for line in tails.splitlines():
        if line.startswith(PROGRESS_PREFIX):
            try:
                done += int(json.loads(line[len(PROGRESS_PREFIX):]).get("done") or 0)
            except (ValueError, TypeError):
                pass
    return live, done


def _state_json(run: Run) -> str:
    return json.dumps(dataclasses.asdict(run), indent=1)


def _ended(task, exit_code) -> str:
    if task is None:
        return "ended (Slurm no longer knows it)"
    text = task.state + (" exit %s" % task.exit if task.exit else "")
    if exit_code not in (None, ""):
        text += ", agent exit %s" % exit_code
    return text


def _agent_error(lines: list) -> str:
    errors = [l[len("agent: error: "):] for l in lines if l.startswith("agent: error: ")]
    return (errors or lines or ["no message"])[-1]


def _last(err: str) -> str:
    lines = [l for l in (err or "").strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


# ---- status -------------------------------------------------------------------------------


def status_lines(transport, target, kernel: str) -> list:
    """What ``harness status`` prints for a Slurm target: the latest run, each array task's
    state, rows and exit code, and the last lines of its stdout and stderr."""
    run = load_current(transport, target.name, kernel)
    if run is None:
        return ["%s: no Slurm run of %s yet" % (transport.label, kernel)]
    folder = run_dir(target.name, kernel, run.id)
    states = read_states(transport, [a["job"] for a in run.arrays])
    rc, out, err = transport.run_capture(
        "cd %s && for f in %s/chunk-*.csv; do [ -f \"$f\" ] && echo \"${f##*/} $(($(wc -l < \"$f\") - 1)) "
        "$(cat \"$f%s\" 2>/dev/null)\"; done; true" % (shlex.quote(transport.workdir or "."), shlex.quote(folder), EXIT_SUFFIX))
    chunk_facts = {}
    for line in out.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("chunk-") and parts[1].isdigit():
            chunk_facts[int(parts[0][len("chunk-"):-len(".csv")])] = (int(parts[1]), parts[2] if len(parts) > 2 else None)
    done = sum(1 for c in range(len(run.chunks)) if chunk_facts.get(c, (0, None))[1] == "0")
    rows = sum(r for r, _ in chunk_facts.values())
    lines = ["%s: Slurm run %s: %d of %d chunks done, %d rows (%d jobs)" % (
        transport.label, run.id, done, len(run.chunks), rows, sum(len(c) for c in run.chunks))]
    tasks = [states.get((a["job"], t)) or TaskState(a["job"], t, "UNKNOWN")
             for a in run.arrays for t in range(len(a["chunks"]))]
    logs = read_logs(transport, folder + "/logs", [t for t in tasks if t.state not in ("PENDING",)], lines=3)
    for t in tasks:
        chunk = run.task_chunk(t.job, t.task)
        lines.append("  array task %s (chunk %s): %s%s%s" % (
            t.name, chunk, t.state, " exit %s" % t.exit if t.exit else "", " (%s)" % t.reason if t.reason else ""))
        lines += ["      " + l for l in logs.get(t.name, [])]
    return lines

