"""What every command shares: the --targets option, given before or after the command."""

from __future__ import annotations

from typing import Optional

import typer

from ..api.common import ROOT, TRITON_INSTALL, kernel_of, pick_build_target, pick_target  # noqa: F401

TARGETS_HELP = "targets.yaml to use (default: ./targets.yaml or $HARNESS_TARGETS); accepted before or after any command"
TargetsOpt = typer.Option(None, "--targets", help=TARGETS_HELP)

# --targets given before the command (harness --targets FILE build ...): the app's callback sets it
targets_before_command: Optional[str] = None


def targets_file_of(targets_file: Optional[str]) -> Optional[str]:
    """--targets given after the command, else before it."""
    return targets_file or targets_before_command
