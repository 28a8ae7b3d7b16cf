"""perf stat -x, : one CSV line per event; '<not supported>' and '<not counted>' are empty cells."""

import os
import shutil
import subprocess


class PerfProfiler:
    name = "perf"

    def __init__(self, perf, events):
        self.perf = perf
        self.events = list(events)
        self.usable = list(events)  # the subset perf accepts here

    @classmethod
    def probe(cls, events, log):
        """A PerfProfiler if perf runs here, else None (and a line on the log saying why)."""
        perf = shutil.which("perf")
        if not perf:
            log("perf not found; falling back to wall clock")
            return None
        probe = subprocess.run([perf, "stat", "-x,", "-e", "task-clock", "--", "true"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            reason = (probe.stderr.strip().splitlines() or ["exit %d" % probe.returncode])[0]
            log("perf stat does not run here (%s); falling back to wall clock" % reason)
            return None
        profiler = cls(perf, events)
        profiler.usable = [e for e in events if profiler._accepts(e)]
        dropped = [e for e in events if e not in profiler.usable]
        if dropped:
            log("perf does not know %s; those columns stay empty" % ", ".join(dropped))
        return profiler

    def _accepts(self, event):
        proc = subprocess.run([self.perf, "stat", "-x,", "-e", event, "--", "true"],
                              capture_output=True, text=True)
        return proc.returncode == 0

    def wrap(self, cmd, scratch):
        if not self.usable:
            return list(cmd)
        return [self.perf, "stat", "-x,", "-o", scratch, "-e", ",".join(self.usable), "--"] + list(cmd)

    def collect(self, scratch):
        counters = {event: None for event in self.events}
        if not os.path.exists(scratch):
            return counters
        with open(scratch) as f:
            counters.update(parse_perf_csv(f.read(), self.events))
        os.unlink(scratch)
        return counters


def parse_perf_csv(text, events):
    """Parse `perf stat -x,` output: value,unit,event,run time,% running,metric,metric unit.

    Values that perf could not count stay None, never 0. Event names match as given or with
    perf's ':u'/':k' modifiers appended.
    """
    found = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) < 3:
            continue
        value, event = fields[0], fields[2]
        name = _match(event, events)
        if name is None:
            continue
        found[name] = _number(value)
    return found


def _match(event, events):
    if event in events:
        return event
    base = event.split(":")[0]
    for e in events:
        if e.split(":")[0] == base:
            return e
    return None


def _number(value):
    value = value.strip()
    if not value or value.startswith("<"):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number.is_integer() else number
