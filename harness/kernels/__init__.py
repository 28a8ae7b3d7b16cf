"""Kernels: one package per kernel, each exporting ``KERNEL`` (a harness.kernels.base.Kernel).

Kernels of your own live in folders named by $HARNESS_KERNELS_PATH (``:``-separated); each
holds ``<name>/__init__.py`` exporting ``KERNEL``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

from ..errors import HarnessError
from .base import Kernel

KERNELS_PATH_ENV = "HARNESS_KERNELS_PATH"


def _extra_dirs():
    return [Path(p) for p in os.environ.get(KERNELS_PATH_ENV, "").split(os.pathsep) if p]


def available() -> list:
    names = [m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.ispkg]
    for folder in _extra_dirs():
        if folder.is_dir():
            names += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    return sorted(set(names))


def get(name: str) -> Kernel:
    for folder in _extra_dirs():
        init = folder / name / "__init__.py"
        if init.is_file():
            module_name = "harness_user_kernels.%s" % name
            spec = importlib.util.spec_from_file_location(module_name, init)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
            return module.KERNEL
    if name in available():
        return importlib.import_module("%s.%s" % (__name__, name)).KERNEL
    close = difflib.get_close_matches(name, available(), n=1)
    hint = " (did you mean %r?)" % close[0] if close else ""
    raise HarnessError("unknown kernel %r%s; known kernels: %s" % (name, hint, ", ".join(available())))
