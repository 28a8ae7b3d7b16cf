"""What Slurm says about a run's array tasks: ``squeue`` for the tasks still queued or running,
``sacct`` for those that ended (``scontrol show job`` where the cluster keeps no accounting),
and the tail of each task's stdout and stderr. Every command is quoted with shlex.quote."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remote_agent.contract import PROGRESS_PREFIX

from ..errors import HarnessError

ENDED = "@@ended"


@dataclass
class TaskState:
    job: str  # the array's job id
    task: int  # the array task id
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, TIMEOUT, PREEMPTED, NODE_FAIL, ...
    exit: str = ""  # Slurm's EXIT:SIGNAL
    reason: str = ""

    @property
    def name(self) -> str:
        return "%s_%d" % (self.job, self.task)


def queued_command() -> str:
    """The user's queued and running array tasks, one line each; fails where squeue fails
    (``-u`` rather than ``--me``: clusters older than Slurm 20.11 have no ``--me``)."""
    return "squeue -h -r -u \"$(id -un)\" -o %s" % shlex.quote("%i|%T|%r")


def parse_queued(text: str, jobs) -> dict:
    """{(job, task): TaskState} of the lines of ``queued_command`` that belong to ``jobs``."""
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2:
            state = _task_state(parts[0], parts[1], reason=parts[2] if len(parts) > 2 else "")
            if state and state.job in jobs:
                out[(state.job, state.task)] = state
    return out


def ended_command(jobs) -> str:
    """How the arrays' tasks ended: sacct, or scontrol where accounting is off."""
    ids = ",".join(jobs)
    return ("sacct -n -P -X -j {ids} -o JobID,State,ExitCode 2>/dev/null || "
            "for j in {each}; do scontrol -o show job \"$j\"; done 2>/dev/null || true").format(
        ids=shlex.quote(ids), each=" ".join(shlex.quote(j) for j in jobs))


def parse_ended(text: str, jobs) -> dict:
    """{(job, task): TaskState} from sacct's ``JobID|State|ExitCode`` lines or scontrol's
    one-line records; the last record of a task wins (a task Slurm requeued has several)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("JobId="):
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            if "ArrayTaskId" not in fields:
                continue
            state = _task_state("%s_%s" % (fields.get("ArrayJobId"), fields["ArrayTaskId"]),
                                fields.get("JobState", ""), fields.get("ExitCode", ""), fields.get("Reason", ""))
        else:
            parts = line.split("|")
            state = _task_state(parts[0], parts[1], parts[2]) if len(parts) >= 3 else None
        if state and state.job in jobs:
            out[(state.job, state.task)] = state
    return out


def _task_state(job_id: str, state: str, exit: str = "", reason: str = ""):
    job, _, task = job_id.partition("_")
    if not task.isdigit():  # a pending range "12_[3-5]" or not an array task
        return None
    words = state.split()
    return TaskState(job, int(task), words[0] if words else "UNKNOWN", exit, "" if reason in ("None", "(null)") else reason)


def read_states(transport, jobs) -> dict:
    """Every task of the arrays ``jobs`` Slurm knows, queued ones from squeue, the others from
    sacct or scontrol: {(job, task): TaskState}."""
    jobs = [str(j) for j in jobs]
    command = "%s; echo %s $?; %s" % (queued_command(), ENDED, ended_command(jobs))
    rc, out, err = transport.run_capture(command)
    queued, _, ended = out.decode("utf-8", "replace").partition(ENDED)
    squeue_rc, _, ended = ended.partition("\n")
    if rc != 0 or squeue_rc.strip() != "0":
        raise HarnessError("squeue failed on %s: %s" % (transport.label, err.strip()[-300:] or "exit %s" % squeue_rc.strip()))
    states = parse_ended(ended, set(jobs))
    states.update(parse_queued(queued, set(jobs)))
    return states


def log_tail(text: str, lines: int = 5) -> list:
    """The last lines of a task's output that say something (not the agent's progress lines)."""
    said = [l for l in text.splitlines() if l.strip() and not l.startswith(PROGRESS_PREFIX)]
    return said[-lines:]


def read_logs(transport, log_dir: str, tasks, lines: int = 5) -> dict:
    """{task name: last lines of its stdout and stderr} for ``tasks`` (TaskStates), one command."""
    if not tasks:
        return {}
    base = shlex.quote(transport.workdir or ".")
    parts = []
    for t in tasks:
        for stream in ("out", "err"):
            path = "%s/%s/%s.%s" % (base, shlex.quote(log_dir), shlex.quote(t.name), stream)
            parts.append("echo %s; tail -n 40 %s 2>/dev/null" % (shlex.quote("@@log %s" % t.name), path))
    rc, out, err = transport.run_capture("; ".join(parts))
    if rc != 0:
        raise HarnessError("cannot read the task logs on %s: %s" % (transport.label, err.strip()[-200:]))
    found, name = {}, None
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith("@@log "):
            name = line[len("@@log "):]
            found.setdefault(name, [])
        elif name is not None:
            found[name].append(line)
    return {n: log_tail("\n".join(text), lines) for n, text in found.items()}
