"""Configs, search spaces and pruning rules."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import yaml

from .errors import HarnessError


@dataclass(frozen=True)
class Rule:
    """A pruning rule: ``prunes(config, shape, target)`` is True when the config is useless or
    invalid for that shape on that target. ``why`` says so in words, for the manifest."""

    name: str
    why: str
    prunes: Callable


def config_id(config: dict, salt: str = "") -> str:
    """A short stable id for a config (and anything else that makes a variant distinct)."""
    text = json.dumps(config, sort_keys=True) + salt
    return "v" + hashlib.sha256(text.encode()).hexdigest()[:10]


def expand(space: dict) -> list:
    """Every combination of the space's values, in a stable order."""
    names = list(space)
    return [dict(zip(names, values)) for values in itertools.product(*(space[n] for n in names))]


def first_pruning_rule(rules, config, shape, target) -> Optional[Rule]:
    for rule in rules:
        if rule.prunes(config, shape, target):
            return rule
    return None


def load_space_file(path: str, base: dict) -> dict:
    """A YAML or JSON mapping of parameter -> list of values, overriding the kernel's ranges."""
    file = Path(path)
    if not file.is_file():
        raise HarnessError("space file %s does not exist" % file)
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise HarnessError("malformed YAML: %s" % getattr(exc, "problem", exc),
                           where="%s:%d" % (file, mark.line + 1) if mark else str(file))
    if not isinstance(data, dict) or not data:
        raise HarnessError("a space file is a mapping of parameter -> list of values", where=str(file))
    space = dict(base)
    for name, values in data.items():
        if name not in base:
            import difflib

            close = difflib.get_close_matches(str(name), list(base), n=1)
            hint = " (did you mean %r?)" % close[0] if close else ""
            raise HarnessError("unknown parameter %r%s; the kernel has %s" % (name, hint, ", ".join(base)),
                               where="%s:%d" % (file, _line_of(file, name)))
        if not isinstance(values, list):
            values = [values]
        if not values:
            raise HarnessError("parameter %r has no values" % name, where="%s:%d" % (file, _line_of(file, name)))
        _check_values(name, values, base[name], "%s:%d" % (file, _line_of(file, name)))
        space[name] = values
    return space


def _check_values(name, values: list, kernel_values: list, where: str) -> None:
    """Each value of the kernel's own kind: whole numbers where the kernel's are (no smaller than
    its smallest when that is 0 or 1: a block of 0 would divide by zero), true/false where its are."""
    kinds = {type(v) for v in kernel_values}
    ints = [v for v in kernel_values if type(v) is int]
    for value in values:
        if type(value) not in kinds:
            raise HarnessError("%s: %r is not %s like the kernel's values (%s)" % (
                name, value, _kind_words(kinds), ", ".join(map(str, kernel_values[:6]))), where=where)
        floor = min(min(ints), 1) if ints and min(ints) >= 0 else None
        if type(value) is int and floor is not None and value < floor:
            raise HarnessError("%s: %r is below %d (the kernel's values start at %d)" % (name, value, floor, min(ints)),
                               where=where)


def _kind_words(kinds) -> str:
    words = {int: "a whole number", bool: "true or false", float: "a number", str: "a string"}
    return " or ".join(sorted(words.get(k, k.__name__) for k in kinds))


def _line_of(file: Path, key) -> int:
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if line.lstrip().startswith(str(key)):
            return number
    return 1
