"""Sizes checked before work (issue 44, defect 6): each a real hostile manifest, shapes list,
targets.yaml or space file through the real CLI or agent; each ends in one line and exit 2
instead of a SIGFPE, a 32-bit wrap, an allocation that kills the machine, an OverflowError or a
TypeError."""

import json
import resource
import subprocess
import sys

import pytest


def _one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip() and not l.startswith("run ")]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("M", [0, -5, 10 ** 12])
def test_agent_refuses_a_manifest_shape_out_of_range(local_workspace, M):
    """M = 0 or -5 crashed every variant with SIGFPE; 10^12 was cut to 32 bits and judged a wrong
    answer. Now the agent refuses the manifest on one line, runs nothing and writes no row."""
    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32,16x16x16", "--space", "space.yaml")
    path = ws.path / "build/local/matmul/manifest.json"
    manifest = json.loads(path.read_text())
    shape = manifest["shapes"][0]
    shape["dims"]["M"] = shape["scalars"]["M"] = M
    path.write_text(json.dumps(manifest))
    results = ws.path / "r.csv"
    proc = subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", str(path.parent), "--results",
                           str(results)], cwd=ws.path, env=ws.env, capture_output=True, text=True, timeout=300)
    _one_line_error(proc, "manifest.json: shape 32x32x32_fp32_NN: M=%d is not a whole number from 1 to" % M)
    assert not results.exists()
    proc = ws.harness("run", check=False)  # through the host, which relays the agent's line
    _one_line_error(proc, "M=%d is not a whole number" % M)
    assert not (ws.path / "results/local/matmul/results.csv").exists()


def _limit_memory(gib):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))
    return apply


@pytest.mark.slow
def test_shapes_past_the_range_or_the_memory_are_refused_before_work(local_workspace):
    """100000^3 passed the shape check and died allocating 74.5 GiB of test data; a shape within
    the range whose data does not fit the memory this process may use is refused before any
    compile (the address-space rlimit makes the memory small for real)."""
    ws = local_workspace

    def build(shapes):
        return subprocess.run([sys.executable, "-m", "harness", "build", "matmul", "--target", "local", "--shapes",
                               shapes, "--space", "space.yaml"], cwd=ws.path, env=ws.env, capture_output=True,
                              text=True, timeout=300, preexec_fn=_limit_memory(16))

    _one_line_error(build("100000x100000x100000"), "M=100000", "past the kernel's range (1 to 65536)")
    line = _one_line_error(build("32768x32768x16384"), "shape 32768x32768x16384_fp32_NN", "8.0 GiB (a, b, ref)",
                           "GiB of memory available")
    assert not (ws.path / "build/local/matmul/manifest.json").exists()
    assert not list((ws.path / "build").rglob("*.elf")), line  # nothing was compiled


@pytest.mark.parametrize("yaml_text, needles", [
    ("r:\n  arch: native\n  ssh: {host: 127.0.0.1, port: 99999999999999999999}\n",
     ["targets.yaml:3", "r.ssh.port: port 99999999999999999999 is not 1 to 65535"]),
    ("r:\n  arch: native\n  ssh:\n    host: h\n    port: 0\n", ["targets.yaml:5", "port 0 is not 1 to 65535"]),
    ("r:\n  arch: native\n  hosts: [a:70000]\n  ssh:\n    host: h\n", ["targets.yaml:3", "port 70000"]),
    ("local:\n  arch: native\n  threads: 1000000000000\n", ["targets.yaml:3", "local.threads", "at most 1024"]),
])
def test_targets_ports_and_threads_out_of_range(local_workspace, yaml_text, needles):
    """A port past 65535 was an OverflowError traceback at connect time; a trillion threads was
    built and crashed in libgomp. Both are one line with file:line when targets.yaml is read."""
    (local_workspace.path / "targets.yaml").write_text(yaml_text)
    _one_line_error(local_workspace.harness("targets", check=False), *needles)


@pytest.mark.parametrize("space, needles", [
    ("MR: [a, b]\n", ["bad.yaml:1", "MR: 'a' is not a whole number"]),
    ("NR: [16]\nMR: [4, 1.5]\n", ["bad.yaml:2", "MR: 1.5 is not a whole number"]),
    ("MR: [0]\n", ["bad.yaml:1", "MR: 0 is below 1"]),
])
def test_space_values_of_the_wrong_kind(local_workspace, space, needles):
    """--space with strings was a TypeError traceback in a pruning rule; a block of 0 divides by
    zero. Each value is checked against the kind of the kernel's own values."""
    (local_workspace.path / "bad.yaml").write_text(space)
    _one_line_error(local_workspace.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32",
                                            "--space", "bad.yaml", check=False), *needles)
