"""The vendor library on GPU nodes (``harness build --library``): the manifest flag, the agent's
library jobs, and the real GPU worker timing the library like a variant (CPU stand-in workers)."""

import csv
import json
import os
import types
from pathlib import Path

from harness.bundle import Manifest
from harness.api.build import add_library
from harness.library import add_reference
from harness.shapes import make_shape
from harness.targets import load_targets
from remote_agent import contract
from remote_agent.agent import Agent
from remote_agent.runners.gpu_library import library_plan

from .test_gpu_supervisor import make_bundle, options, standin_runner

ROOT = Path(__file__).resolve().parents[1]
LIB = "lib:torch.matmul"


def _manifest(tmp_path, shapes):
    return Manifest(kernel="matmul", target={"name": "gpu-node", "backend": "cuda"}, toolchain={}, variants=[],
                    shapes=shapes, jobs=[], pruned=[], seed=0, config_names=[], tolerances={}, data_on_device=True)


def test_build_library_on_a_gpu_target_sets_the_manifest_flag(tmp_path):
    target = load_targets(ROOT / "targets.yaml")["gpu-node"]
    shapes = [make_shape(16, 4096, 4096, "fp16", "NN"), make_shape(64, 128, 256, "bf16", "TN")]
    manifest = _manifest(tmp_path, [])
    manifest.save(tmp_path)
    assert "library" not in json.loads((tmp_path / "manifest.json").read_text())  # unset: not written
    summary = types.SimpleNamespace(manifest=manifest, bundle=tmp_path)
    assert add_library(None, target, shapes, summary, 10.0, "auto", None) == [LIB]
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["library"] == {"torch.matmul": [s.id for s in shapes]}
    assert Manifest.load(tmp_path / "manifest.json").library == data["library"]
    # the tuner's rounds ask through add_reference: more shapes join, none twice, nothing compiled
    more = [shapes[1], make_shape(32, 32, 32, "fp16", "NT")]
    assert add_reference(None, target, more, manifest, tmp_path) == [LIB]
    assert manifest.library["torch.matmul"] == [shapes[0].id, shapes[1].id, more[1].id]
    assert manifest.variants == [] and manifest.jobs == []


def test_a_manifest_without_the_field_reads_as_no_library(tmp_path):
    old = json.loads(_manifest(tmp_path, []).to_json())
    assert "library" not in old
    (tmp_path / "manifest.json").write_text(json.dumps(old))
    assert Manifest.load(tmp_path / "manifest.json").library == {}
    assert library_plan({"shapes": [{"id": "a"}], "jobs": []}) == ([], [])


def test_library_plan_one_job_per_shape_and_a_fleet_share_measures_each_shape_once():
    m = {"shapes": [{"id": "s0"}, {"id": "s1"}, {"id": "s2"}],
         "jobs": [{"variant": "v", "shape": "s1"}, {"variant": "w", "shape": "s0"}, {"variant": "w", "shape": "s1"}],
         "library": {"torch.matmul": ["s1", "s0", "s2", "gone"]}}
    variants, jobs = library_plan(m)
    assert [v["id"] for v in variants] == [LIB]
    assert variants[0]["status"] == contract.OK and variants[0]["config"] == {} and variants[0]["artifact"] is None
    assert [(j["variant"], j["shape"]) for j in jobs] == [(LIB, "s0"), (LIB, "s1"), (LIB, "s2")]
    # --select: s1 goes with job 0 (its first), s0 with job 1, s2 (no jobs) with job 0
    assert [j["shape"] for j in library_plan(m, {0})[1]] == ["s1", "s2"]
    assert [j["shape"] for j in library_plan(m, {1, 2})[1]] == ["s0"]
    assert library_plan(m, {2})[1] == []
    # a list of names: every shape
    assert len(library_plan(dict(m, library=["torch.matmul"]))[1]) == 3


def _run(bundle, results, monkeypatch, api, devices=("cuda:0", "cuda:1"), hide_torch=None):
    standin_runner(monkeypatch, devices=devices)
    monkeypatch.setenv("HARNESS_GPU_API", "tests.gpu_standin:" + api)
    if hide_torch:  # an importable 'torch' that fails, so the test does not depend on this machine's
        fake = Path(hide_torch) / "torch"
        fake.mkdir(parents=True, exist_ok=True)
        (fake / "__init__.py").write_text("raise ImportError('No module named torch (hidden by the test)')\n")
        monkeypatch.setenv("PYTHONPATH", str(hide_torch) + os.pathsep + os.environ["PYTHONPATH"])
    agent = Agent(str(bundle), str(results), options(), out=open(os.devnull, "w"), log=lambda m: None)
    done = agent.run()
    with open(results, newline="") as f:
        return list(csv.DictReader(f)), done


def _with_library(bundle, value):
    path = Path(bundle) / "manifest.json"
    m = json.loads(path.read_text())
    m["library"] = value
    path.write_text(json.dumps(m))
    return m


def test_the_library_is_timed_like_a_variant_and_resumes(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b")
    m = _with_library(bundle, {"torch.matmul": [s["id"] for s in json.loads((bundle / "manifest.json").read_text())
                                                ["shapes"]]})
    results = tmp_path / "results.csv"
    rows, done = _run(bundle, results, monkeypatch, "StandinLibraryApi")
    assert done == len(m["jobs"]) + len(m["shapes"])
    lib = {r["shape_id"]: r for r in rows if r["variant_id"] == LIB}
    assert sorted(lib) == sorted(s["id"] for s in m["shapes"])
    for shape in m["shapes"]:
        r = lib[shape["id"]]
        assert r["status"] == contract.OK, r
        assert float(r["rel_err"]) < contract.REL_ERR_TOL[shape["dtype"]] and float(r["err_ratio"]) == 0.0
        assert float(r["time_ns_median"]) > 0 and float(r["time_ns_min"]) <= float(r["time_ns_median"])
        assert int(r["iterations"]) >= 3 and float(r["tflops"]) > 0
        assert r["profiler"] == "events" and "stand-in" in r["message"]
        assert r["cfg_BLOCK_M"] == "" and r["cfg_fault"] == "" and r["ctr_regs"] == "" and r["artifact_sha256"] == ""
        assert (r["M"], r["layout"]) == (str(shape["dims"]["M"]), shape["layout"])
    assert all(r["status"] == contract.OK for r in rows)
    # resumed: nothing runs twice, the library rows included
    rows2, done2 = _run(bundle, results, monkeypatch, "StandinLibraryApi")
    assert done2 == 0 and len(rows2) == len(rows)
    # the key of a library row is variant|shape|device like any other
    keys = [contract.job_key(r["variant_id"], r["shape_id"], r["device"]) for r in rows2]
    assert len(keys) == len(set(keys))


def test_without_torch_on_the_node_each_library_row_says_so(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b")
    m = _with_library(bundle, ["torch.matmul"])
    rows, _ = _run(bundle, tmp_path / "results.csv", monkeypatch, "StandinApi", devices=("cuda:0",),
                   hide_torch=tmp_path / "site")
    lib = [r for r in rows if r["variant_id"] == LIB]
    assert len(lib) == len(m["shapes"])
    for r in lib:
        assert r["status"] == contract.LOAD_ERROR
        assert r["message"].startswith("lib:torch.matmul: torch is not usable on this node") and "hidden" in r["message"]
        assert r["time_ns_median"] == ""
    assert all(r["status"] == contract.OK for r in rows if r["variant_id"] != LIB)  # the variants are unaffected


def test_a_bundle_without_the_flag_runs_no_library(tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b")
    rows, _ = _run(bundle, tmp_path / "results.csv", monkeypatch, "StandinLibraryApi", devices=("cuda:0",))
    assert rows and not [r for r in rows if r["variant_id"].startswith("lib:")]


def test_the_gpu_agent_measures_a_shape_in_the_manifests_order_the_library_where_it_is_listed(tmp_path, monkeypatch):
    # a winners' re-measure round lists each shape's order (harness.rounds.listed_order): on a GPU
    # the first job of a round meets it cool, the last at its power cap, so the place must rotate
    bundle = make_bundle(tmp_path / "b")
    m = _with_library(bundle, ["torch.matmul"])
    fp16, bf16 = [s["id"] for s in m["shapes"]]
    m["order"] = {fp16: ["v03_fp16", LIB, "v01_fp16", "v05_fp16"]}  # the rest of fp16's jobs after these
    (bundle / "manifest.json").write_text(json.dumps(m))
    rows, _ = _run(bundle, tmp_path / "results.csv", monkeypatch, "StandinLibraryApi", devices=("cuda:0",))
    measured = {sid: [r["variant_id"] for r in rows if r["shape_id"] == sid] for sid in (fp16, bf16)}
    assert measured[fp16] == ["v03_fp16", LIB, "v01_fp16", "v05_fp16", "v00_fp16", "v02_fp16", "v04_fp16"]
    # a shape the order does not name: as before, by variant id (the library's id sorts first)
    assert measured[bf16] == [LIB] + ["v%02d_bf16" % i for i in range(6)]
    assert all(r["status"] == contract.OK for r in rows)
    # the host writes the field only when it is set
    assert Manifest.load(bundle / "manifest.json").order == m["order"]
    assert "order" not in json.loads(_manifest(tmp_path, []).to_json())
