"""push: the bundle and the agent to the target, only what the remote lacks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import state, ui
from ..errors import HarnessError
from .common import ROOT, pick_target


@dataclass
class PushArgs:
    """The options of ``push``, as the command line's defaults have them."""

    target: Optional[str] = None
    kernel: Optional[str] = None
    targets_file: Optional[str] = None


def push(args: PushArgs):
    """Copy the bundle and the agent to the target over SSH: one round trip to learn what the
    remote has, then one tar stream with only the missing files.

    When nothing is built for the target yet, it is built first from the last build's kernel,
    shapes and options (content-addressed: what was compiled before is not compiled again)."""
    from ..bundle import Manifest, bundle_dir
    from ..push import push as do_push
    from ..transport import for_hosts

    tgt = pick_target(args.target, args.targets_file, "push")
    if not tgt.is_remote:
        ui.out.print("%s runs on this machine; nothing to push" % tgt.name)
        return
    last_build = state.last(ROOT, "last_build") or {}
    kern = args.kernel or state.get(ROOT, tgt.name)[1].get("kernel") or last_build.get("kernel")
    if not kern:
        raise HarnessError("nothing built yet; run: harness build KERNEL --target %s" % tgt.name)
    bundle = bundle_dir(ROOT, tgt.name, kern)
    if not (bundle / "manifest.json").exists():
        build_like_last(tgt, kern, args.targets_file)
    manifest = Manifest.load(bundle / "manifest.json")
    transports = for_hosts(tgt)
    if len(transports) > 1:
        from ..fleet import push_fleet

        summaries = push_fleet(bundle, manifest, tgt, transports)
        for t, summary in zip(transports, summaries):
            ui.out.print("pushed %s to %s: %d files sent, %d already there, %.1f MB in %d SSH commands" % (
                kern, t.label, summary.sent_files, summary.skipped_files, summary.bytes_sent / 1e6,
                summary.commands))
        state.record(ROOT, tgt.name, kernel=kern, pushed=True)
        return
    transport = transports[0].open()
    try:
        with ui.progress() as bar:
            task = bar.add_task("push %s" % tgt.name, total=None, info="")
            progress = _ByteProgress(bar, task)
            summary = do_push(bundle, manifest, transport, progress)
    finally:
        transport.close()
    state.record(ROOT, tgt.name, kernel=kern, pushed=True)
    ui.out.print("pushed %s to %s: %d files sent, %d already there, %.1f MB in %d SSH commands" % (
        kern, tgt.name, summary.sent_files, summary.skipped_files, summary.bytes_sent / 1e6, summary.commands))


def build_like_last(tgt, kern: str, targets_file) -> None:
    """Build ``kern`` for ``tgt`` with the last build's shapes and options."""
    from .build import BuildArgs, build, options_text

    last = state.last(ROOT, "last_build")
    if not last:
        raise HarnessError("nothing built for %s yet; run: harness build %s --target %s" % (tgt.name, kern, tgt.name))
    given = options_text(last["options"])
    ui.out.print("nothing built for %s yet: building %s for it with the options of the last build (for %s)%s" % (
        tgt.name, kern, last["target"], ": " + given if given else ""))
    build(BuildArgs(kernel=kern, target=tgt.name, targets_file=targets_file, **last["options"]))


class _ByteProgress:
    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def start(self, total):
        self.bar.update(self.task, total=total, info="bytes")

    def advance(self, n):
        self.bar.update(self.task, advance=n)
