"""targets.yaml -> validated Target objects, with errors that name file, line and key."""

from __future__ import annotations

import difflib
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from remote_agent import measure

from .errors import HarnessError
from .names import check_name

TARGETS_ENV = "HARNESS_TARGETS"
DEFAULT_FILE = "targets.yaml"

ARCHES = ("x86_64", "aarch64", "riscv64", "native")
DEFAULT_TARGET = "local"  # what a command that names no target builds for, without `default:`
SETTINGS = ("default",)  # top-level keys that are settings of the file, not targets
BACKENDS = ("cpu", "cuda", "hip")
PROFILERS = ("perf", "wallclock", "events", "ncu", "rocprof")
ESTIMATORS = measure.ESTIMATORS  # the time that decides (remote_agent/stats.py)
MAX_THREADS = 1024  # OpenMP threads of a CPU build; a billion built, then crashed in libgomp
MAX_VLEN = 65536  # the largest VLEN RVV allows


@dataclass
class SSH:
    host: str
    user: Optional[str] = None
    port: int = 22
    key: Optional[str] = None
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new_host_keys: bool = False


@dataclass
class Slurm:
    """A Slurm cluster behind the target's login node (``ssh:``): how its jobs are submitted."""
    partition: Optional[str] = None
    account: Optional[str] = None
    gres: Optional[str] = None  # e.g. gpu:1 (one GPU per array task)
    time: Optional[str] = None  # a task's time limit, in sbatch --time's formats
    options: list = field(default_factory=list)  # more sbatch arguments, e.g. [--qos=high]
    tasks: int = 4  # array tasks: the jobs are split in this many chunks
    max_running: Optional[int] = None  # array tasks running at once (--array=...%N)
    shared_dir: Optional[str] = None  # a folder the login and compute nodes share; default: workdir
    poll: float = 10.0  # seconds between two looks at the queue
    retries: int = 3  # times a chunk whose task died is submitted again


@dataclass
class Target:
    name: str
    arch: str = "native"
    backend: str = "cpu"
    toolchain: str = "auto"  # cpu: gcc | clang | auto; gpu: triton
    march: Optional[str] = None
    vlen: Optional[int] = None
    cflags: list = field(default_factory=list)
    threads: int = 1
    profiler: str = "perf"
    events: list = field(default_factory=list)
    run_under: Optional[str] = None
    estimator: Optional[str] = None  # min or median; None: min on CPU targets, median on GPU ones
    ssh: Optional[SSH] = None
    slurm: Optional[Slurm] = None
    hosts: list = field(default_factory=list)
    workdir: str = "~/.harness-remote"
    python: str = "python3"
    gpu_arch: Optional[str] = None  # "90" for sm90, "gfx942" for hip
    shared_mem_max: Optional[int] = None  # bytes per block the device allows
    max_threads: int = 1024
    multiprocessors: Optional[int] = None  # SMs / CUs: the grid of persistent GPU kernels
    devices: Optional[str] = None
    description: str = ""
    source: str = ""  # file:line where it was defined

    @property
    def is_remote(self) -> bool:
        return self.ssh is not None

    @property
    def resolved_arch(self) -> str:
        return platform.machine() if self.arch == "native" else self.arch

    def host_list(self) -> list:
        """(host, port, workdir) of every machine of the target: ``hosts:`` for a fleet (entries
        ``HOST``, ``HOST:PORT`` or ``{host, port, workdir}``), else ``ssh.host``."""
        if not self.ssh:
            return []
        if not self.hosts:
            return [(self.ssh.host, self.ssh.port, self.workdir)]
        out = []
        for entry in self.hosts:
            if isinstance(entry, dict):
                out.append((str(entry["host"]), int(entry.get("port", self.ssh.port)),
                            str(entry.get("workdir", self.workdir))))
            else:
                host, _, port = str(entry).rpartition(":") if ":" in str(entry) else (str(entry), "", "")
                out.append((host, int(port) if port else self.ssh.port, self.workdir))
        return out

    @property
    def is_gpu(self) -> bool:
        return self.backend in ("cuda", "hip")

    def device_count(self) -> int:
        """Devices a machine of the target measures on: those ``devices:`` lists, one where it lists none."""
        return count_devices(self.devices)

    @property
    def deciding_estimator(self) -> str:
        """``estimator:`` where set, else min on CPU targets (native or under qemu), median on GPUs."""
        return self.estimator or measure.default_estimator(self.backend)


def count_devices(devices) -> int:
    """The devices a ``devices`` list names ("0,1,2", or a run's override), one where it names none."""
    return max(1, len([d for d in str(devices or "").split(",") if d.strip()]))


# key -> (python types, required)
_TARGET_KEYS = {
    "arch": (str, False),
    "backend": (str, False),
    "toolchain": (str, False),
    "march": (str, False),
    "vlen": (int, False),
    "cflags": (list, False),
    "threads": (int, False),
    "profiler": (str, False),
    "events": (list, False),
    "run_under": (str, False),
    "estimator": (str, False),
    "ssh": (dict, False),
    "slurm": (dict, False),
    "hosts": (list, False),
    "workdir": (str, False),
    "python": (str, False),
    "gpu_arch": ((str, int), False),
    "shared_mem_max": (int, False),
    "max_threads": (int, False),
    "multiprocessors": (int, False),
    "devices": ((str, int), False),
    "description": (str, False),
}
_SSH_KEYS = {
    "host": (str, True),
    "user": (str, False),
    "port": (int, False),
    "key": (str, False),
    "known_hosts": (str, False),
    "accept_new_host_keys": (bool, False),
}
_SLURM_KEYS = {
    "partition": (str, False),
    "account": (str, False),
    "gres": (str, False),
    "time": ((str, int), False),
    "options": (list, False),
    "tasks": (int, False),
    "max_running": (int, False),
    "shared_dir": (str, False),
    "poll": ((int, float), False),
    "retries": (int, False),
}
# what sbatch's --time takes: minutes, [days-]hours:minutes[:seconds], days-hours, UNLIMITED
_SLURM_TIME_RE = re.compile(r"^(\d+|\d+:\d+|\d+:\d+:\d+|\d+-\d+|\d+-\d+:\d+|\d+-\d+:\d+:\d+|unlimited|infinite)$",
                            re.IGNORECASE)
_GRES_RE = re.compile(r"^[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)*)*$")
# sbatch options the harness sets itself for every array
_SLURM_OWN_OPTIONS = ("--array", "-a", "--output", "-o", "--error", "-e", "--parsable", "--wrap",
                      "--chdir", "-D", "--job-name", "-J")
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def find_targets_file(explicit: Optional[str] = None) -> Path:
    """--targets FILE, then $HARNESS_TARGETS, then ./targets.yaml."""
    for candidate, origin in ((explicit, "--targets"), (os.environ.get(TARGETS_ENV), TARGETS_ENV)):
        if candidate:
            path = Path(candidate)
            if not path.is_file():
                raise HarnessError("targets file %s (from %s) does not exist" % (path, origin))
            return path
    path = Path(DEFAULT_FILE)
    if not path.is_file():
        raise HarnessError(
            "no targets.yaml in the current directory; pass --targets FILE or set %s" % TARGETS_ENV
        )
    return path


def load_targets(path: Path) -> dict:
    """Parse and validate the whole file; returns {name: Target}."""
    return load_file(path)[0]


def default_target(targets_file: Optional[str] = None) -> tuple:
    """(Target, why) for a command that names no target: ``default: NAME`` in targets.yaml,
    else the target ``local``; ``why`` says where the choice came from."""
    path = find_targets_file(targets_file)
    targets, default, where = load_file(path)
    name = default or DEFAULT_TARGET
    if name not in targets:
        raise HarnessError("no target named, no `default: NAME` and no %r target; pass --target NAME or add "
                           "`default: NAME` (known: %s)" % (DEFAULT_TARGET, ", ".join(sorted(targets))),
                           where=str(path))
    why = "%s says `default: %s`" % (where, name) if default else "%s names no `default:`" % path
    return targets[name], why


def load_file(path: Path) -> tuple:
    """({name: Target}, default target name or None, file:line of ``default:``)."""
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise HarnessError("not a text file", where=str(path))
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = "%s:%d" % (path, mark.line + 1) if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise HarnessError("malformed YAML: %s" % problem, where=where)
    if root is None:
        raise HarnessError("the file is empty", where=str(path))
    if not isinstance(root, yaml.MappingNode):
        raise HarnessError("expected a mapping of target names", where=_where(path, root))
    targets_node = root
    keys = {_scalar(k): v for k, v in root.value}
    if "targets" in keys and isinstance(keys["targets"], yaml.MappingNode):
        targets_node = keys["targets"]
    targets = {}
    for key_node, value_node in targets_node.value:
        name = _scalar(key_node)
        if targets_node is root and name in SETTINGS:
            continue
        if not isinstance(name, str) or not name.strip():
            raise HarnessError("empty target name", where=_where(path, key_node))
        check_name(name, "target", where=_where(path, key_node))  # it becomes a folder name here and there
        if name in targets:
            raise HarnessError("duplicate target name %r" % name, where=_where(path, key_node))
        targets[name] = _build_target(path, name, key_node, value_node)
    if not targets:
        raise HarnessError("no targets defined", where=str(path))
    default = _default_name(path, keys.get("default"), targets)
    return targets, default, _where(path, keys["default"]) if default else None


def _default_name(path, node, targets: dict) -> Optional[str]:
    """The target ``default: NAME`` names (``${ENV}`` expanded), checked against the file's targets."""
    if node is None:
        return None
    if isinstance(node, yaml.MappingNode):
        raise HarnessError("`default` is not a target: it names the target commands use when none is given "
                           "(e.g. `default: %s`); give this target another name" % next(iter(targets)),
                           where=_where(path, node))
    value = _expand_env(path, node, _to_python(node)) if isinstance(node, yaml.ScalarNode) else None
    if not isinstance(value, str) or not value.strip():
        raise HarnessError("default: must name a target, e.g. `default: %s` (got %s)" % (
            next(iter(targets)), "a list" if isinstance(node, yaml.SequenceNode) else repr(value)),
            where=_where(path, node))
    if value not in targets:
        raise HarnessError("default: unknown target %r%s (known: %s)" % (
            value, _suggest(value, targets), ", ".join(sorted(targets))), where=_where(path, node))
    return value


def get_target(name: str, targets_file: Optional[str] = None) -> Target:
    path = find_targets_file(targets_file)
    targets = load_targets(path)
    if name not in targets:
        raise HarnessError("unknown target %r%s (known: %s)" % (
            name, _suggest(name, targets), ", ".join(sorted(targets))), where=str(path))
    return targets[name]


def _build_target(path, name, key_node, node) -> Target:
    if not isinstance(node, yaml.MappingNode):
        raise HarnessError("target %r must be a mapping" % name, where=_where(path, node))
    values = _check_mapping(path, node, _TARGET_KEYS, "target %r" % name)
    if "ssh" in values:
        ssh_node = dict((_scalar(k), v) for k, v in node.value)["ssh"]
        values["ssh"] = SSH(**_check_mapping(path, ssh_node, _SSH_KEYS, "%s.ssh" % name))
        _check_port(values["ssh"].port, "%s.ssh.port" % name,
                    _where(path, dict((_scalar(k), v) for k, v in ssh_node.value).get("port", ssh_node)))
    where = lambda key: _where(path, dict((_scalar(k), v) for k, v in node.value).get(key, node))
    if "slurm" in values:
        values["slurm"] = _build_slurm(path, name, dict((_scalar(k), v) for k, v in node.value)["slurm"])
        if "ssh" not in values:
            raise HarnessError("%s: slurm needs an ssh section (the cluster's login node)" % name, where=where("slurm"))
        if values.get("hosts"):
            raise HarnessError("%s: a slurm target has no hosts (Slurm picks the nodes)" % name, where=where("hosts"))
    for key, allowed in (("arch", ARCHES), ("backend", BACKENDS), ("profiler", PROFILERS), ("estimator", ESTIMATORS)):
        if key in values and values[key] not in allowed:
            raise HarnessError("%s.%s: %r is not one of %s%s" % (
                name, key, values[key], ", ".join(allowed), _suggest(values[key], allowed)),
                where=where(key))
    for key in ("vlen", "threads", "max_threads", "shared_mem_max", "multiprocessors"):
        if key in values and values[key] <= 0:
            raise HarnessError("%s.%s must be positive, got %r" % (name, key, values[key]), where=where(key))
    for key, cap in (("threads", MAX_THREADS), ("vlen", MAX_VLEN)):
        if key in values and values[key] > cap:
            raise HarnessError("%s.%s is %r; at most %d" % (name, key, values[key], cap), where=where(key))
    if "vlen" in values and values["vlen"] & (values["vlen"] - 1):
        raise HarnessError("%s.vlen must be a power of two, got %r" % (name, values["vlen"]), where=where("vlen"))
    if "gpu_arch" in values:
        values["gpu_arch"] = str(values["gpu_arch"])
    if "devices" in values:
        values["devices"] = str(values["devices"])
    for key in ("events", "cflags", "hosts"):
        if key in values and not all(isinstance(v, (str, dict)) for v in values[key]):
            raise HarnessError("%s.%s must be a list of strings" % (name, key), where=where(key))
    if values.get("hosts") and "ssh" not in values:
        raise HarnessError("%s: hosts needs an ssh section (user, key, port for all hosts)" % name,
                           where=where("hosts"))
    for entry in values.get("hosts", []):
        if isinstance(entry, dict):
            unknown = set(entry) - {"host", "port", "workdir"}
            if unknown or "host" not in entry:
                raise HarnessError("%s.hosts: %r needs host and may have port, workdir" % (name, entry),
                                   where=where("hosts"))
            text = "%s:%s" % (entry["host"], entry.get("port", 22))
        else:
            text = str(entry)
        port = text.rpartition(":")[2] if ":" in text else "22"
        if not text.strip() or not port.isdigit():
            raise HarnessError("%s.hosts: %r is not HOST or HOST:PORT" % (name, entry), where=where("hosts"))
        _check_port(int(port), "%s.hosts: %r" % (name, entry), where("hosts"))
    backend = values.get("backend", "cpu")
    if backend != "cpu" and not values.get("gpu_arch"):
        raise HarnessError("%s: backend %s needs gpu_arch (e.g. 90 or gfx942)" % (name, backend),
                           where=_where(path, key_node))
    if backend != "cpu" and "profiler" not in values:
        values["profiler"] = "events"
    return Target(name=name, source=_where(path, key_node), **values)


def _check_port(port, what: str, where: str) -> None:
    """A TCP port: a whole number from 1 to 65535 (a larger one overflowed in the socket call)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise HarnessError("%s: port %r is not 1 to 65535" % (what, port), where=where)


def _build_slurm(path, name, node) -> Slurm:
    what = "%s.slurm" % name
    values = _check_mapping(path, node, _SLURM_KEYS, what)
    nodes = dict((_scalar(k), v) for k, v in node.value)
    where = lambda key: _where(path, nodes[key])  # noqa: E731
    if "time" in values:
        # the text as written: YAML 1.1 would read 1:30:00 as a base-60 integer
        raw = nodes["time"].value if isinstance(nodes["time"], yaml.ScalarNode) else values["time"]
        values["time"] = _expand_env(path, nodes["time"], str(raw)).strip()
        if not _SLURM_TIME_RE.match(values["time"]):
            raise HarnessError("%s.time: %r is not a Slurm time limit (minutes, HH:MM:SS, D-HH:MM:SS)"
                               % (what, values["time"]), where=where("time"))
    if "gres" in values and not _GRES_RE.match(values["gres"]):
        raise HarnessError("%s.gres: %r is not NAME[:TYPE]:COUNT (e.g. gpu:1)" % (what, values["gres"]),
                           where=where("gres"))
    for key in ("partition", "account", "shared_dir"):
        if key in values and not values[key].strip():
            raise HarnessError("%s.%s is empty" % (what, key), where=where(key))
    for key in ("tasks", "max_running", "poll"):
        if key in values and values[key] <= 0:
            raise HarnessError("%s.%s must be positive, got %r" % (what, key, values[key]), where=where(key))
    if "retries" in values and values["retries"] < 0:
        raise HarnessError("%s.retries must be 0 or more, got %r" % (what, values["retries"]), where=where("retries"))
    options = values.get("options", [])
    if not all(isinstance(o, (str, int, float)) and not isinstance(o, bool) for o in options):
        raise HarnessError("%s.options must be a list of sbatch arguments" % what, where=where("options"))
    values["options"] = [str(o) for o in options]
    if options and not values["options"][0].startswith("-"):
        raise HarnessError("%s.options: %r is not an sbatch option (they start with -)" % (what, options[0]),
                           where=where("options"))
    for option in values["options"]:
        if option.split("=", 1)[0] in _SLURM_OWN_OPTIONS:
            raise HarnessError("%s.options: %s is set by the harness for every array" % (what, option.split("=", 1)[0]),
                               where=where("options"))
    return Slurm(**values)


def _check_mapping(path, node, schema, what) -> dict:
    if not isinstance(node, yaml.MappingNode):
        raise HarnessError("%s must be a mapping" % what, where=_where(path, node))
    values = {}
    for key_node, value_node in node.value:
        key = _scalar(key_node)
        if key not in schema:
            raise HarnessError("%s: unknown key %r%s" % (what, key, _suggest(key, schema)),
                               where=_where(path, key_node))
        types, _ = schema[key]
        value = _expand_env(path, value_node, _to_python(value_node))
        if value is None:
            continue
        if isinstance(value, bool) and types is not bool:
            raise HarnessError("%s: %s must be %s, got %r" % (what, key, _type_name(types), value),
                               where=_where(path, value_node))
        if types is int and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)  # from ${ENV}
        if not isinstance(value, types):
            raise HarnessError("%s: %s must be %s, got %r" % (what, key, _type_name(types), value),
                               where=_where(path, value_node))
        values[key] = value
    for key, (_, required) in schema.items():
        if required and key not in values:
            raise HarnessError("%s: missing required key %r" % (what, key), where=_where(path, node))
    return values


def _expand_env(path, node, value):
    if isinstance(value, str):
        def repl(match):
            var, default = match.group(1), match.group(2)
            if var in os.environ:
                return os.environ[var]
            if default is not None:
                return default
            raise HarnessError("environment variable %s is not set (write ${%s:-default} for a default)"
                               % (var, var), where=_where(path, node))
        return _ENV_RE.sub(repl, value)
    if isinstance(value, list):
        return [_expand_env(path, node, v) for v in value]
    return value


def _to_python(node):
    return yaml.safe_load(yaml.serialize(node)) if node is not None else None


def _scalar(node):
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _where(path, node) -> str:
    return "%s:%d" % (path, node.start_mark.line + 1)


def _suggest(word, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return " (did you mean %r?)" % close[0] if close else ""


def _type_name(types) -> str:
    names = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "a mapping",
             bool: "true or false"}
    if isinstance(types, tuple):
        return " or ".join(names[t] for t in types)
    return names[types]
