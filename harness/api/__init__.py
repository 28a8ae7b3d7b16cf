"""The harness as a library: one plain function per step, each taking a dataclass of options.

    from harness.api.build import BuildArgs, build
    build(BuildArgs(kernel="matmul", target="local", shapes="64x64x64"))

build.build, push.push, run.run, report.report and tune.tune do what the commands of the same
names do (harness/commands/workflow.py turns the command line's options into these dataclasses);
the dataclasses' defaults are the command line's. ``tune`` calls the others directly. They print
through harness.ui and raise HarnessError on bad input, as the commands do; paths are relative
to the current folder (the project), as on the command line.
"""
