"""What a Slurm run submits: one job array, array task N running the agent on chunk N of the jobs.

The task script is plain bash with every value quoted by shlex.quote; sbatch reads it from
stdin, on the login node, in the cluster's shared folder (the tasks start there too). A task
writes its chunk's own results file, the node's device facts beside it (``<results>.device.json``)
and, when the agent returns, its exit code (``<results>.exit``, and as the task's own); a task
that is killed leaves no exit code.
"""

from __future__ import annotations

import shlex

EXIT_SUFFIX = ".exit"
DEVICE_SUFFIX = ".device.json"


def task_script(arms: list, rerun_all: bool, probe: str = "") -> str:
    """``arms``: ``(results path, agent argv)`` in array-index order. With ``rerun_all`` a task
    passes ``--all`` only while its results file is empty: a task that Slurm or the harness
    starts again resumes its own file instead of measuring its jobs twice. ``probe``: Python
    code whose output (the node's device facts, see harness.devinfo) the task keeps beside its
    results, with the agent's Python."""
    lines = ["#!/bin/bash", "# harness: array task N runs the agent on chunk N", 'case "$SLURM_ARRAY_TASK_ID" in']
    for index, (results, argv) in enumerate(arms):
        lines.append("  %d) RESULTS=%s; set -- %s ;;" % (index, shlex.quote(results),
                                                          " ".join(shlex.quote(str(a)) for a in argv)))
    lines += ['  *) echo "harness: no chunk for array task $SLURM_ARRAY_TASK_ID" >&2; exit 3 ;;', "esac"]
    if probe:
        lines.append('"$1" -c %s > "$RESULTS%s" 2>/dev/null' % (shlex.quote(probe), DEVICE_SUFFIX))
    lines.append("ALL=%s" % ("--all" if rerun_all else ""))
    lines.append('if [ -s "$RESULTS" ]; then ALL=; fi')
    lines.append('PYTHONPATH=agent${PYTHONPATH:+:$PYTHONPATH} "$@" $ALL')
    lines.append('code=$?')
    lines.append('echo "$code" > "$RESULTS%s"' % EXIT_SUFFIX)
    lines.append('exit "$code"')
    return "\n".join(lines) + "\n"


def sbatch_argv(slurm, job_name: str, tasks: int, log_dir: str) -> list:
    """sbatch's arguments for an array of ``tasks`` tasks; stdout and stderr of each task go to
    ``log_dir/<array job>_<task>.out`` and ``.err``."""
    array = "0-%d" % (tasks - 1)
    if slurm.max_running:
        array += "%%%d" % slurm.max_running
    argv = ["sbatch", "--parsable", "--job-name", job_name, "--array", array,
            "--output", "%s/%%A_%%a.out" % log_dir, "--error", "%s/%%A_%%a.err" % log_dir]
    for option, value in (("--partition", slurm.partition), ("--account", slurm.account),
                          ("--gres", slurm.gres), ("--time", slurm.time)):
        if value:
            argv += [option, value]
    return argv + list(slurm.options)


def submit_command(workdir: str, script: str, argv: list, log_dir: str, state_path: str, state_before: str,
                   state_after: str, remove=(), current=None) -> str:
    """One shell command for the login node: ``remove`` (files) goes, the script goes to sbatch
    on stdin; on success the run's state file is rewritten with the new array's job id between
    ``state_before`` and ``state_after``, ``current`` (path, run id) names the run, and the job
    id is printed."""
    state = shlex.quote(state_path)
    command = "cd {wd} && mkdir -p {logs} && ".format(wd=shlex.quote(workdir or "."), logs=shlex.quote(log_dir))
    if remove:
        command += "rm -f %s && " % " ".join(shlex.quote(r) for r in remove)
    command += ("id=$(printf '%s' {script} | {sbatch}) && id=${{id%%;*}} && "
                "printf '%s' {before} \"$id\" {after} > {state}.tmp && mv {state}.tmp {state} && "
                ).format(state=state, script=shlex.quote(script), sbatch=" ".join(shlex.quote(a) for a in argv),
                         before=shlex.quote(state_before), after=shlex.quote(state_after))
    if current:
        command += "printf '%%s' %s > %s && " % (shlex.quote(current[1]), shlex.quote(current[0]))
    return command + 'echo "$id"'
