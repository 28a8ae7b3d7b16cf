"""The harness command line: build, push, run, report, tune, targets.

Each command lives in harness/commands/<name>.py; this module puts them on one Typer app.
Bad input ends with one line on stderr and exit code 2; nothing measured is lost.
"""

from __future__ import annotations

import sys

import typer

from . import ui
from .commands import build, push, report, run, status, targets, tune
from .errors import HarnessError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    help="Tune GEMM-like kernels for hardware you do not sit at.\n\n"
         "Typical flow: [bold]harness build matmul --target laptop[/], [bold]harness push laptop[/], "
         "[bold]harness run --remote laptop[/], [bold]harness report[/] (or all four: [bold]harness tune[/]). "
         "Targets come from targets.yaml in the current folder, --targets FILE or $HARNESS_TARGETS.",
)
app.command()(build.build)
app.command()(push.push)
app.command()(run.run)
app.command()(report.report)
app.command()(tune.tune)
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
    except KeyboardInterrupt:
        ui.console.print("interrupted; results measured so far are kept")
        sys.exit(130)


if __name__ == "__main__":
    main()
