"""The Slurm transport: a cluster reached through its login node over SSH. Files go to the
cluster's shared folder as on any SSH host (``harness push`` needs nothing else); runs go to
the scheduler as job arrays (``slurm_run``); each array task writes its own results file, and
a fetch hands them home merged into the one ``results.csv`` the rest of the harness reads."""

from __future__ import annotations

import shlex
from pathlib import Path

from .base import DEVICE_FACTS, SCHEDULER
from .slurm_batch import DEVICE_SUFFIX
from .ssh import SSHTransport


class SlurmTransport(SSHTransport):
    name = "slurm"
    capabilities = frozenset({SCHEDULER, DEVICE_FACTS})

    def __init__(self, target, host=None, port=None, workdir=None):
        super().__init__(target, host, port, workdir or target.slurm.shared_dir or target.workdir)
        self.label = "%s (slurm)" % self.label

    def run_jobs(self, target, kernel: str, options, on_progress=None) -> str:
        """Run the pushed bundle's jobs as a job array; returns the run's folder."""
        from .slurm_run import run_array

        return run_array(self, target, kernel, options, on_progress)

    def status_lines(self, target, kernel: str) -> list:
        from .slurm_run import status_lines

        return status_lines(self, target, kernel)

    def device_facts_command(self) -> str:
        """A command printing the device facts an array task found on its compute node (the
        newest), not the login node's."""
        pattern = "results/%s/*/slurm/*/*%s" % (shlex.quote(self.target.name), DEVICE_SUFFIX)
        return "cd %s && f=$(ls -t %s 2>/dev/null | head -n 1) && [ -s \"$f\" ] && cat \"$f\"" % (
            shlex.quote(self.workdir or "."), pattern)

    def fetch_tree(self, rel_dir: str, dest: Path) -> int:
        """Like SSH's, then the tasks' files (``slurm/<run>/chunk-N.csv``, oldest run first)
        are merged into ``rel_dir/results.csv`` there."""
        from .fetch import merge_results

        size = super().fetch_tree(rel_dir, dest)
        folder = Path(dest) / rel_dir
        for part in sorted((folder / "slurm").glob("*/chunk-*.csv")):
            merge_results(part, folder / "results.csv")
        return size
