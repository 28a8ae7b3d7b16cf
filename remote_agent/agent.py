"""Run every job of a bundle and append one results row per (variant, shape, device)."""

import fcntl
import hashlib
import json
import os
import socket
import sys
import time

from . import bundlecheck, contract, limits
from .errors import AgentError
from .results import ResultsWriter, ResultsWriteError, SchemaMismatch


def load_manifest(bundle):
    path = os.path.join(bundle, "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        raise AgentError("cannot read %s: %s" % (path, exc))
    if not isinstance(manifest, dict):
        raise AgentError("%s is not a manifest (a JSON object); rebuild the bundle" % path)
    if manifest.get("schema_version") != contract.MANIFEST_SCHEMA:
        raise AgentError("%s has manifest schema %.40r, this agent reads schema %s; rebuild the bundle with "
                         "this harness (harness build) and push it again"
                         % (path, manifest.get("schema_version"), contract.MANIFEST_SCHEMA))
    limits.check_manifest(manifest, path)  # kinds and sizes before anything runs: one line, not a crash
    bundlecheck.check_manifest_paths(bundle, manifest)
    return manifest


def problem_dims(manifest):
    """The kernel's problem dimension names, in order (the results' dimension columns)."""
    shapes = manifest["shapes"]
    return tuple(shapes[0]["dims"]) if shapes else contract.MATMUL_DIMS


def make_runner(bundle, manifest, options, log):
    """The runner of the bundle's backend (runners.RUNNERS: the table of runners by kind)."""
    from .runners import runner_factory

    return runner_factory(manifest["target"]["backend"])(bundle, manifest, options, log)


class Agent:
    def __init__(self, bundle, results_path, options, out=sys.stdout, log=None):
        self.bundle = os.path.abspath(bundle)
        self.results_path = results_path
        self.options = options
        self.out = out
        self.log = log or (lambda msg: print("agent: " + msg, file=sys.stderr, flush=True))
        self.manifest = load_manifest(bundle)
        self.host = socket.gethostname()
        self.selected = parse_select(getattr(options, "select", None), len(self.manifest["jobs"]))
        options.scratch_dir = os.path.dirname(os.path.abspath(results_path))

    def run(self):
        self._check_before_start()
        lock = self._lock()
        try:
            return self._run()
        except ResultsWriteError as exc:
            raise AgentError(str(exc))
        finally:
            lock.close()

    def _check_before_start(self):
        """A pushed bundle is a whole push with this agent's code (``--pushed``), and the
        results' disk has room to start and for the first rows (docs/security.md)."""
        if getattr(self.options, "pushed", False):
            bundlecheck.check_push_marker(self.bundle)
        bundlecheck.require_room(os.path.dirname(os.path.abspath(self.results_path)), bundlecheck.START_ROOM)

    def _lock(self):
        os.makedirs(os.path.dirname(os.path.abspath(self.results_path)), exist_ok=True)
        lock = open(self.results_path + ".lock", "a")
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise AgentError("another run is already writing %s; wait for it or stop it first"
                             % self.results_path)
        lock.write("%d\n" % os.getpid())
        lock.flush()
        return lock

    def _run(self, runner=None, skip=None):
        """Run the jobs; ``runner``: one kept from an earlier round (remote_agent.serve);
        ``skip``: job keys already measured (default: every row of the file, or none with --all)."""
        self._verify_data()
        runner = runner or make_runner(self.bundle, self.manifest, self.options, self.log)
        if hasattr(runner, "seed_leaders"):  # racing: each shape's best so far in this results file
            runner.seed_leaders(self.results_path)
        try:
            writer = ResultsWriter(self.results_path, self.header(runner))
        except SchemaMismatch as exc:
            raise AgentError(str(exc))
        todo, variants, shapes, broken = self.prepare(runner, writer, skip)
        total, done = len(todo), 0
        self._progress(done, total, None)
        for result_job, device, result in self._results(runner, todo, variants, shapes, broken):
            self.write_result(writer, runner, variants, shapes, result_job, device, result)
            done += 1
            self._progress(done, total, result["status"], result_job["variant"], result_job["shape"])
        writer.close()
        return done

    def header(self, runner):
        """The results columns of this manifest's rows with this runner's counters."""
        m = self.manifest
        return contract.results_header(m["config_names"], self._counter_names(runner), problem_dims(m))

    def write_result(self, writer, runner, variants, shapes, job, device, result):
        writer.write(self._row(variants[job["variant"]], shapes[job["shape"]], device, result, runner))

    def prepare(self, runner, writer, skip=None):
        """The jobs to run, (todo [(job, device)], variants, shapes, broken {variant id: why}),
        after recording the rows of pairs that cannot run (pruned, failed compiles)."""
        m = self.manifest
        variants = {v["id"]: v for v in m["variants"]}
        shapes = {s["id"]: s for s in m["shapes"]}
        devices = runner.devices()
        if skip is None:
            skip = set() if self.options.rerun_all else writer.done
        todo = [(j, d) for i, j in enumerate(m["jobs"]) if self.selected is None or i in self.selected
                if variants[j["variant"]]["status"] == contract.OK
                for d in devices if contract.job_key(j["variant"], j["shape"], d) not in skip]
        # GPU bundles built with --library: one lib:<name> job per shape, resumed like the rest
        lib_variants, lib_jobs = runner.library_plan(self.selected) if hasattr(runner, "library_plan") else ([], [])
        variants.update((v["id"], v) for v in lib_variants)
        todo += [(j, d) for j in lib_jobs for d in devices if contract.job_key(j["variant"], j["shape"], d) not in skip]
        if self.selected is None or 0 in self.selected:  # one agent of a fleet records these
            self._record_unrunnable(writer, variants, shapes, devices[0], skip)
        broken = self._verify_artifacts({j["variant"]: variants[j["variant"]] for j, _ in todo})
        return todo, variants, shapes, broken

    def _results(self, runner, todo, variants, shapes, broken):
        """Yields (job, device, result) as they finish; GPU runners spread jobs over devices,
        the CPU runner measures the jobs of one shape interleaved, a group at a time."""
        if hasattr(runner, "run_all"):
            for item in runner.run_all(todo, variants, shapes, broken, self.options):
                yield item
            return
        for group in interleave_groups(todo, shapes, runner.group_size):
            runnable = []
            for job, device in group:
                if job["variant"] in broken:
                    yield job, device, {"status": contract.LOAD_ERROR, "message": broken[job["variant"]]}
                else:
                    runnable.append((job, device))
            items = [(variants[j["variant"]], shapes[j["shape"]], j["grid"]) for j, _ in runnable]
            results = runner.run_group(items, self.options.warmup, self.options.iters) if items else []
            for (job, device), result in zip(runnable, results):
                yield job, device, result

    def _counter_names(self, runner):
        return list(getattr(runner, "counter_names", None) or self.manifest["target"]["events"])

    def _verify_data(self):
        """The data files of the shapes this run may measure match their sha256, checked before
        anything is written (docs/security.md)."""
        shapes = {s["id"]: s for s in self.manifest["shapes"]}
        wanted = dict.fromkeys(j["shape"] for i, j in enumerate(self.manifest["jobs"])
                               if self.selected is None or i in self.selected)
        bundlecheck.check_data(self.bundle, [shapes[sid] for sid in wanted if sid in shapes],
                               remove_damaged=getattr(self.options, "pushed", False))

    def _verify_artifacts(self, variants):
        """A corrupted or missing artifact is caught by its hash before it runs (only those this
        run will run: a fleet's chunk or a resumed run does not re-read the whole bundle)."""
        broken = {}
        for vid, v in variants.items():
            if not v.get("artifact"):
                continue
            # a shared library the artifact loads (the library row's OpenBLAS) is checked the same way
            files = [(v["artifact"], v["sha256"], "variant %s artifact" % vid)] + [
                (lib["path"], lib["sha256"], "variant %s library" % vid) for lib in (v.get("launch") or {}).get("libs", [])]
            for rel, want, what in files:
                try:
                    path = bundlecheck.bundle_path(self.bundle, rel, what)
                    digest = _sha256(path)
                except AgentError as exc:
                    broken[vid] = str(exc)
                    break
                except OSError as exc:
                    broken[vid] = "artifact missing: %s" % exc
                    break
                if digest != want:
                    broken[vid] = "artifact %s does not match its hash; push again" % rel
                    if getattr(self.options, "pushed", False):
                        bundlecheck.remove_quietly(path)  # the next push sends it again
                    break
        return broken

    def _record_unrunnable(self, writer, variants, shapes, device, skip):
        """Rows for pruned pairs and failed compiles, so every status shows in the report."""
        for p in self.manifest["pruned"]:
            if contract.job_key(p["variant"], p["shape"], device) in skip:
                continue
            variant = {"id": p["variant"], "config": p["config"], "sha256": None}
            writer.write(self._row(variant, shapes[p["shape"]], device,
                                   {"status": contract.PRUNED, "message": "%s: %s" % (p["rule"], p["why"])}, None))
        for vid, sid in self._failed_pairs(variants, shapes):
            v = variants[vid]
            if contract.job_key(vid, sid, device) not in skip:
                writer.write(self._row(v, shapes[sid], device, {"status": v["status"], "message": v["message"]}, None))

    def _failed_pairs(self, variants, shapes):
        """(variant id, shape id) of the failed compiles: the manifest's ``failed`` pairs; a failed
        variant they do not name (a bundle written before ``failed``, a reference build of the
        library) on every shape of its dtype."""
        pairs = [(f["variant"], f["shape"]) for f in self.manifest.get("failed", [])]
        named = {vid for vid, _ in pairs}
        for v in variants.values():
            if v["status"] != contract.OK and v["id"] not in named:
                pairs += [(v["id"], s["id"]) for s in shapes.values() if s["dtype"] == v["dtype"]]
        return [p for p in dict.fromkeys(pairs) if p[0] in variants and p[1] in shapes]

    def _row(self, variant, shape, device, result, runner):
        m = self.manifest
        row = {
            "schema_version": contract.RESULTS_SCHEMA, "target": m["target"]["name"], "kernel": m["kernel"],
            "variant_id": variant["id"], "shape_id": shape["id"], "dtype": shape["dtype"],
            "layout": shape["layout"], "device": device,
            "artifact_sha256": variant.get("sha256"), "agent_version": contract.AGENT_VERSION,
            "host": self.host, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "profiler": getattr(getattr(runner, "profiler", None), "name", "") if runner else "",
        }
        row.update(shape["dims"])
        for key, value in result.items():
            if key.startswith("ctr:"):
                row[contract.COUNTER_PREFIX + contract.sanitize_counter(key[4:])] = value
            else:
                row[key] = value
        for name, value in variant["config"].items():
            row[contract.CONFIG_PREFIX + name] = value
        time_ns = contract.deciding_time(row)
        if time_ns:
            row["tflops"] = round(shape["flops"] / time_ns / 1e3, 6)
            row["gbps"] = round(shape["bytes"] / time_ns, 6)
        return row

    def _progress(self, done, total, status, variant=None, shape=None):
        info = {"done": done, "total": total, "status": status, "variant": variant, "shape": shape}
        self.out.write(contract.PROGRESS_PREFIX + json.dumps(info) + "\n")
        self.out.flush()


def _option(options, name, default):
    value = getattr(options, name, None)
    return default if value is None else value


def interleave_groups(todo, shapes, group_size):
    """``todo``'s (job, device) pairs in groups measured together: the jobs of one shape on one
    device, in their order, at most ``group_size(shape)`` per group (the shapes in the order
    their first job came)."""
    by_shape = {}
    for job, device in todo:
        by_shape.setdefault((job["shape"], device), []).append((job, device))
    for (sid, _), jobs in by_shape.items():
        size = max(1, group_size(shapes[sid]))
        for i in range(0, len(jobs), size):
            yield jobs[i:i + size]


def parse_select(text, count):
    """'0-99,120' -> {0..99, 120}; None -> None (all jobs)."""
    if text is None:
        return None
    chosen = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            lo, _, hi = part.partition("-")
            chosen.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise AgentError("bad --select %r: write indices and ranges like 0-99,120" % text)
    return {i for i in chosen if 0 <= i < count}


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
