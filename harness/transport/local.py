"""The local transport: the agent runs on this machine, on the host's own bundle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..errors import HarnessError


class LocalTransport:
    """The agent runs here (base.Transport's calls; no files to copy, no capabilities)."""

    name = "local"
    is_remote = False
    capabilities = frozenset()

    def __init__(self, target=None):
        self.target = target
        self.python = sys.executable

    def run(self, argv: list, on_line=None, cwd=None, env=None) -> tuple:
        """Run a command here, streaming stdout lines to on_line; returns (rc, stderr)."""
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    cwd=cwd, env=env, bufsize=1)
        except OSError as exc:
            raise HarnessError("cannot start %s: %s" % (argv[0], exc))
        import threading

        err_lines = []
        reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
        reader.start()
        for line in proc.stdout:
            if on_line:
                on_line(line.rstrip("\n"))
        proc.wait()
        reader.join()
        return proc.returncode, "".join(err_lines)

    def close(self):
        pass

    @staticmethod
    def agent_root() -> Path:
        return Path(__file__).resolve().parent.parent.parent
