"""A compile worker's loop, in its own process: one JSON job per line on stdin, one JSON reply
per line, ``MODULE.compile_job(job)``. Run by a worker ``harness.compile.workers`` started with
``Popen`` (``python -m harness.compile.worker_loop MODULE``) and by one its zygote forked
(harness/compile/zygote.py), where MODULE is imported already."""

from __future__ import annotations

import importlib
import json
import os
import sys

NICE = 10  # the workers' lower scheduling priority


def serve(module_name: str) -> int:
    """The protocol on a private copy of stdout (a compiler that prints cannot corrupt it), one
    reply line per job line."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    handle = importlib.import_module(module_name).compile_job
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(handle(json.loads(line))) + "\n")
            out.flush()
    return 0


def lower_priority() -> None:
    try:
        os.nice(NICE)  # where the agent measures on this machine too, its GPU workers come first
    except OSError:
        pass


if __name__ == "__main__":
    lower_priority()
    sys.exit(serve(sys.argv[1]))
