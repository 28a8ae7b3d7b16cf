"""harness push."""

from __future__ import annotations

from typing import Optional

import typer

from .. import state, ui
from .common import ROOT, TargetsOpt, kernel_of, pick_target


def push(
    target: Optional[str] = typer.Argument(None, help="target to push to (default: the last one built)"),
    kernel: Optional[str] = typer.Option(None, "--kernel", "-k", help="kernel bundle to push (default: the last built)"),
    targets_file: Optional[str] = TargetsOpt,
):
    """Copy the bundle and the agent to the target over SSH: one round trip to learn what the
    remote has, then one tar stream with only the missing files."""
    from ..bundle import Manifest, bundle_dir
    from ..push import push as do_push
    from ..transport import for_hosts

    tgt = pick_target(target, targets_file, "push")
    if not tgt.is_remote:
        ui.out.print("%s runs on this machine; nothing to push" % tgt.name)
        return
    kern = kernel_of(tgt.name, kernel)
    bundle = bundle_dir(ROOT, tgt.name, kern)
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


class _ByteProgress:
    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def start(self, total):
        self.bar.update(self.task, total=total, info="bytes")

    def advance(self, n):
        self.bar.update(self.task, advance=n)
