"""What every toolchain module returns, and the compiler call with a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class CompileResult:
    status: str  # ok | compile_error | compile_timeout
    artifact: Optional[Path]
    message: str = ""
    launch: dict = field(default_factory=dict)  # entry name, parameters, threads, shared memory...
    seconds: float = 0.0
    cached: bool = False
    reused: bool = False  # taken from the compile cache kept across projects (harness.compile.cache)

    @staticmethod
    def load_cached(artifact: Path) -> Optional["CompileResult"]:
        """A result recorded by an earlier build with the same content hash (ok or failed)."""
        sidecar = artifact.with_name(artifact.name + ".json")
        if not sidecar.exists():
            return None
        data = json.loads(sidecar.read_text())
        if data["status"] == "ok" and not artifact.exists():
            return None
        return CompileResult(data["status"], artifact if data["status"] == "ok" else None,
                             data.get("message", ""), data.get("launch", {}), data.get("seconds", 0.0), True)

    @staticmethod
    def reuse(artifact: Path) -> Optional["CompileResult"]:
        """The result of an earlier compile in any project, from the compile cache kept across
        tunes (``harness.compile.cache``), copied into this bundle; None when it has none."""
        from . import cache

        if not cache.restore(artifact):
            return None
        result = CompileResult.load_cached(artifact)
        if result is not None:
            result.reused = True
            cache.count("reused")
        return result

    def save_cached(self, artifact: Path) -> None:
        """Record the result next to the artifact, and keep both in the compile cache."""
        from . import cache

        sidecar = artifact.with_name(artifact.name + ".json")
        data = asdict(self)
        data.pop("reused", None)
        cache.count("compiled")
        data["artifact"] = str(self.artifact) if self.artifact else None
        tmp = sidecar.with_name(sidecar.name + ".tmp%d.%d" % (os.getpid(), threading.get_ident()))
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, sidecar)
        if self.status != "compile_timeout":  # a longer timeout may succeed: not kept across tunes
            cache.keep(artifact)


def run_compiler(cmd: list, timeout: float, artifact: Path) -> CompileResult:
    """Run one compile-and-link command writing ``artifact.tmp``; move it in place on success."""
    tmp = Path(str(artifact) + ".tmp")
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        tmp.unlink(missing_ok=True)
        return CompileResult("compile_timeout", None, "compile took over %gs" % timeout,
                             seconds=time.monotonic() - start)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return CompileResult("compile_error", None, first_error_line(proc.stderr), seconds=seconds)
    os.replace(tmp, artifact)
    return CompileResult("ok", artifact, seconds=seconds)


def first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    return stderr.strip()[:300]


def run_python_child(module: str, payload: dict, timeout: float, env: dict):
    """Run ``python -m module`` with ``payload`` as JSON on stdin, in its own process group
    (killed whole past ``timeout``), with this checkout on PYTHONPATH. Returns
    ``(returncode, facts, stderr)`` where facts is the last JSON line the child printed (or
    None), and None when it timed out."""
    import json
    import signal
    import sys

    env = dict(env)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(json.dumps(payload), timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return None
    line = next((l for l in reversed(out.splitlines()) if l.startswith("{")), None)
    return proc.returncode, json.loads(line) if line else None, err
