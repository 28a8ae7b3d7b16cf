"""Bad input: one clear line, exit code 2, no traceback, nothing measured lost."""

import re

import pytest

from tests.conftest import ANSWERS_ONLY


def _one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert re.search(needle, lines[0]) if needle.startswith("N=") else needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("yaml_text, needles", [
    ("local:\n  arch: native\n  profiler: [perf\n", ["targets.yaml:4", "malformed YAML"]),
    ("local:\n  arch: native\n  profilr: perf\n", ["targets.yaml:3", "unknown key 'profilr'", "did you mean 'profiler'"]),
    ("local:\n  arch: risc5\n", ["targets.yaml:2", "arch", "'risc5'"]),
    ("local:\n  vlen: many\n", ["targets.yaml:2", "vlen must be an integer"]),
    ("local:\n  arch: native\n  estimator: mean\n", ["targets.yaml:3", "local.estimator", "'mean' is not one of min, median"]),
    ("local:\n  arch: native\nlocal:\n  arch: native\n", ["targets.yaml:3", "duplicate target name 'local'"]),
    ("local:\n  ssh:\n    port: 22\n", ["targets.yaml:3", "missing required key 'host'"]),
    ("local:\n  workdir: ${NO_SUCH_VARIABLE_HERE}\n", ["targets.yaml:2", "NO_SUCH_VARIABLE_HERE is not set"]),
])
def test_malformed_targets_yaml(local_workspace, yaml_text, needles):
    (local_workspace.path / "targets.yaml").write_text(yaml_text)
    _one_line_error(local_workspace.harness("targets", check=False), *needles)


def test_an_unknown_estimator_on_run_and_tune(local_workspace):
    for command in (["run", "--target", "local"], ["tune", "matmul", "--target", "local"]):
        _one_line_error(local_workspace.harness(*command, "--estimator", "mean", check=False),
                        "--estimator mean: choose min or median")


def test_unknown_target_and_kernel_suggest(local_workspace):
    ws = local_workspace
    _one_line_error(ws.harness("build", "matmul", "--target", "lcoal", check=False), "unknown target 'lcoal'",
                    "did you mean 'local'")
    _one_line_error(ws.harness("build", "matmull", "--target", "local", check=False), "unknown kernel 'matmull'",
                    "did you mean 'matmul'")


@pytest.mark.parametrize("shapes, needle", [
    ("64x64", "bad shape '64x64'"),
    ("64x0x64", "N=0"),
    ("64x-3x64", "N=-3 in shape .64x-3x64. must be positive"),
    ("64xbx64", "is not a whole number"),
    ("64x64x99999999", "absurdly large"),
    ("64x64x64:fp8", "unknown dtype 'fp8'"),
    ("64x64x64:fp16:XY", "unknown layout 'XY'"),
])
def test_bad_shape_strings(local_workspace, shapes, needle):
    _one_line_error(local_workspace.harness("build", "matmul", "--target", "local", "--shapes", shapes,
                                            check=False), needle)


@pytest.mark.slow
def test_shapes_file_missing_binary_or_with_a_typo(local_workspace):
    ws = local_workspace
    _one_line_error(ws.harness("build", "matmul", "--target", "local", "--shapes-file", "nope.txt", check=False),
                    "does not exist")
    (ws.path / "bin.dat").write_bytes(b"\x00\x01\x02binary")
    _one_line_error(ws.harness("build", "matmul", "--target", "local", "--shapes-file", "bin.dat", check=False),
                    "binary")
    (ws.path / "shapes.txt").write_text("# my shapes\n64x64x64\n128x128xl28\n")
    _one_line_error(ws.harness("build", "matmul", "--target", "local", "--shapes-file", "shapes.txt", check=False),
                    "shapes.txt:3", "128x128xl28")


@pytest.mark.slow
def test_unreachable_host(workspace):
    ws = workspace
    ws.harness("build", "matmul", "--target", "unreachable", "--shapes", "32x32x32", "--space", "space.yaml")
    _one_line_error(ws.harness("push", "unreachable", check=False), "cannot reach", "127.0.0.1")


@pytest.mark.slow
def test_unknown_host_key_is_refused(workspace, tmp_path):
    ws = workspace
    text = (ws.path / "targets.yaml").read_text().replace("known_hosts: %s" % ws.sshd.known_hosts,
                                                          "known_hosts: %s" % (tmp_path / "empty_known_hosts"))
    (ws.path / "targets.yaml").write_text(text)
    ws.harness("build", "matmul", "--target", "rv", "--shapes", "32x32x32", "--space", "space.yaml")
    _one_line_error(ws.harness("push", "rv", check=False), "not in known_hosts")


@pytest.mark.slow
def test_bad_input_loses_no_results(local_workspace):
    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32", "--space", "space.yaml")
    ws.harness("run", "--iters", "2", *ANSWERS_ONLY)
    results = ws.path / "results/local/matmul/results.csv"
    before = results.read_bytes()
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32", check=False)
    ws.harness("run", "--target", "nowhere", check=False)
    assert results.read_bytes() == before
    # a results file of another schema version is refused, and kept as it is
    results.write_text(before.decode().replace("schema_version", "schema_v0", 1))
    proc = ws.harness("report", check=False)
    _one_line_error(proc, "another schema version")


@pytest.mark.slow
def test_a_manifest_of_the_old_schema_is_refused_by_agent_and_host(local_workspace):
    """A bundle built before kernels declared their operands (schema 1: shapes with M, N, K and no
    operands) cannot be run by this agent: it says so on one line and measures nothing."""
    import json
    import subprocess
    import sys

    ws = local_workspace
    ws.harness("build", "matmul", "--target", "local", "--shapes", "32x32x32", "--space", "space.yaml")
    path = ws.path / "build/local/matmul/manifest.json"
    old = json.loads(path.read_text())
    old["schema_version"] = 1
    for s in old["shapes"]:
        s.update(s.pop("dims"))
        del s["operands"], s["scalars"]
    path.write_text(json.dumps(old))
    results = ws.path / "r.csv"
    proc = subprocess.run([sys.executable, "-m", "remote_agent", "run", "--bundle", str(path.parent),
                           "--results", str(results)], cwd=ws.path, env=ws.env, capture_output=True, text=True)
    _one_line_error(proc, "manifest schema 1, this agent reads schema 2", "rebuild the bundle")
    assert not results.exists()
    proc = ws.harness("run", check=False)  # the host relays the agent's line (after its progress bar)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "manifest schema 1, this agent reads schema 2; rebuild the bundle" in proc.stderr.strip().splitlines()[-1]
