"""Runners by kind: the table of the agent's runners, one per target backend.

A runner factory is ``(bundle, manifest, options, log) -> runner``, the runner what agent.Agent
drives (elf.ElfRunner: one process per variant on a CPU; gpu.GpuRunner: one worker process per
GPU through the driver library, for cuda and hip alike). Modules are imported only when
their backend runs. Standard library only.
"""

import importlib

from ..errors import AgentError

# backend -> "module:factory" (the module relative to this package)
RUNNERS = {
    "cpu": ".elf:make_elf_runner",
    "cuda": ".gpu:make_gpu_runner",
    "hip": ".gpu:make_gpu_runner",
}


def runner_factory(backend):
    """The factory of the backend's runner; one clear error for a backend no runner takes."""
    spec = RUNNERS.get(backend)
    if spec is None:
        raise AgentError("no runner for backend %r (this agent runs: %s)" % (backend, ", ".join(sorted(RUNNERS))))
    module, name = spec.split(":")
    return getattr(importlib.import_module(module, __package__), name)
