"""The kernel's device plug-in: the module of the kernel's own folder (harness/kernels/<k>/
device.py) that the bundle carries, named with its sha256 by the manifest's ``device_plugin``
(``{"file": ..., "sha256": ...}``). The GPU worker loads it with importlib after checking the
hash, and asks it for what depends on the kernel: ``torch_reference(torch, data)``,
``check_reference_kernel(worker)``, ``reference_grid(shape, config)`` and ``LIBRARIES`` (library
name -> ``launcher(torch, stream, data)``). Standard library only."""

import hashlib
import importlib.util
import os
import sys

from .gpu_reference import fatal

REQUIRED = ("torch_reference", "check_reference_kernel", "reference_grid", "LIBRARIES")


def load_device_plugin(bundle, manifest):
    """The bundle's device plug-in module; a fatal GpuError (the run stops) where the manifest
    names none, the file is missing, outside the bundle or not the one hashed, or it lacks a call."""
    facts = manifest.get("device_plugin") or {}
    if not facts.get("file") or not facts.get("sha256"):
        raise fatal("the bundle's kernel %s has no device plug-in (the manifest's device_plugin); rebuild it "
                    "with this harness, and give the kernel a device.py if it has none" % manifest.get("kernel"))
    root = os.path.realpath(bundle)
    path = os.path.realpath(os.path.join(root, facts["file"]))
    if not path.startswith(root + os.sep):
        raise fatal("the manifest's device_plugin %r lies outside the bundle" % facts["file"])
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        raise fatal("cannot read the device plug-in %s: %s" % (facts["file"], exc))
    if hashlib.sha256(source).hexdigest() != facts["sha256"]:
        raise fatal("the device plug-in %s is not the one the manifest hashed; push the bundle again"
                    % facts["file"])
    name = "harness_device_plugin_%s" % facts["sha256"][:16]
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise fatal("the device plug-in %s does not load: %s: %s" % (facts["file"], type(exc).__name__, exc))
        sys.modules[name] = module
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise fatal("the device plug-in %s lacks %s" % (facts["file"], ", ".join(missing)))
    return module
