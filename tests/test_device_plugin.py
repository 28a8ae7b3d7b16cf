"""The kernel's side of the GPU agent lives in its folder (device.py) and travels in the bundle,
hash-checked; the agent's own code names no kernel."""

import json
import re
from pathlib import Path

import pytest

from harness import kernels
from harness.bundle import Manifest, pushed_files
from harness.build import copy_device_plugin
from remote_agent.agent import AgentError
from tests.test_gpu_supervisor import make_bundle, options, run_agent

REPO = Path(__file__).resolve().parent.parent
KERNEL_NAMES = re.compile(r"\b(matmul|scaled_mm|fp8_blockscale)\b", re.IGNORECASE)


def test_the_agent_names_no_kernel():
    hits = ["%s:%d: %s" % (path.relative_to(REPO), n, line.strip())
            for path in sorted((REPO / "remote_agent").rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if KERNEL_NAMES.search(line)]
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("name", ["matmul", "fp8_blockscale"])
def test_a_gpu_kernel_ships_its_device_plugin_under_its_hash(tmp_path, name):
    kernel = kernels.get(name)
    assert kernel.device_plugin.parent.name == name  # in the kernel's own folder
    facts = copy_device_plugin(kernel, tmp_path)
    assert (tmp_path / facts["file"]).read_bytes() == kernel.device_plugin.read_bytes()
    assert facts["file"] == "device/%s-device.py" % facts["sha256"][:16]
    assert copy_device_plugin(kernel, tmp_path) == facts  # content-addressed: the same file again


def test_concurrent_builds_copy_the_plugin_without_racing(tmp_path):
    """Rounds of one tune build their bundles in threads at once (seen failing on an H200 node:
    one writer renamed the other's temporary file away)."""
    import threading

    kernel = kernels.get("matmul")
    for attempt in range(20):  # the race is a matter of timing: give it many chances
        out = tmp_path / str(attempt)
        start, errors, facts = threading.Barrier(16), [], []

        def copy():
            start.wait()
            try:
                facts.append(copy_device_plugin(kernel, out))
            except Exception as exc:  # noqa: BLE001 - the test reports whatever escaped
                errors.append(repr(exc))

        threads = [threading.Thread(target=copy) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(facts) == 16 and all(f == facts[0] for f in facts)
        assert (out / facts[0]["file"]).read_bytes() == kernel.device_plugin.read_bytes()
        assert not list((out / "device").glob("*.tmp"))


def test_the_plugin_is_pushed_with_the_bundle(tmp_path):
    bundle = make_bundle(tmp_path / "b")
    manifest = Manifest.load(bundle / "manifest.json")
    assert manifest.device_plugin["file"] in pushed_files(bundle, manifest)


def test_a_plugin_changed_after_the_build_stops_the_run_with_one_clear_error(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b")
    facts = json.loads((bundle / "manifest.json").read_text())["device_plugin"]
    plugin = bundle / facts["file"]
    plugin.write_text(plugin.read_text() + "\nprint('changed on the node')\n")
    with pytest.raises(AgentError, match="device plug-in %s is not the one the manifest hashed" % re.escape(
            facts["file"])):
        run_agent(bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))


def test_a_bundle_without_a_plugin_says_to_rebuild(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b")
    manifest = json.loads((bundle / "manifest.json").read_text())
    del manifest["device_plugin"]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(AgentError, match="has no device plug-in .*rebuild it"):
        run_agent(bundle, tmp_path / "results.csv", options(), monkeypatch, devices=("cuda:0",))
