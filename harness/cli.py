"""The harness command line: build, push, run, report, tune, targets.

Each command's options live in harness/commands/ (build, push, run, report and tune in
workflow.py, which call harness/api/); this module puts them on one Typer app.
Bad input ends with one line on stderr and exit code 2; nothing measured is lost.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from . import ui
from .commands import common, status, targets, workflow
from .errors import HarnessError

# optional dependencies: the top-level module -> what to install
INSTALL = {
    "triton": common.TRITON_INSTALL,
    "optuna": "pip install 'optuna>=4' (the bayes strategy)",
}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    help="Tune GEMM-like kernels for hardware you do not sit at.\n\n"
         "Typical flow: [bold]harness build matmul[/] (for the `default:` target in targets.yaml), [bold]harness push laptop[/], "
         "[bold]harness run --remote[/], [bold]harness report[/] (or all four: [bold]harness tune[/]). "
         "Targets come from targets.yaml in the current folder, --targets FILE or $HARNESS_TARGETS.",
)


@app.callback()
def _before_command(targets_file: Optional[str] = common.TargetsOpt):
    common.targets_before_command = targets_file


app.command()(workflow.build)
app.command()(workflow.push)
app.command()(workflow.run)
app.command()(workflow.report)
app.command()(workflow.tune)
from .commands import simulate  # noqa: E402
app.command()(simulate.simulate)
app.command()(status.status)
targets_app = typer.Typer(help="List targets, or check what a target's machine has.",
                          invoke_without_command=True, no_args_is_help=False)
targets_app.callback()(targets.targets_list)
targets_app.command("check")(targets.targets_check)
app.add_typer(targets_app, name="targets")


def main():
    try:
        app()
    except HarnessError as exc:
        from rich.markup import escape

        ui.console.print("[red]error:[/] %s" % escape(str(exc)), highlight=False, soft_wrap=True)
        sys.exit(2)
    except ImportError as exc:
        line = missing_dependency(exc)
        if line is None:
            raise
        ui.console.print("[red]error:[/] %s" % line, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        ui.console.print("interrupted; results measured so far are kept")
        sys.exit(130)


def missing_dependency(exc: ImportError) -> Optional[str]:
    """One line naming what to install, for a module outside harness that is not installed (the
    ImportError itself or one it was raised from); None for anything else."""
    from rich.markup import escape

    while exc is not None:
        name = (getattr(exc, "name", None) or "").split(".")[0]
        if isinstance(exc, ModuleNotFoundError) and name and name not in ("harness", "remote_agent"):
            return escape("Python package %r is not installed: %s" % (
                name, INSTALL.get(name, "pip install %s (or reinstall harness: pip install -e .)" % name)))
        exc = exc.__cause__ or exc.__context__
    return None


if __name__ == "__main__":
    main()
