"""Wall clock: the variant's own timer only; every counter column stays empty."""


class WallclockProfiler:
    name = "wallclock"

    def __init__(self, events=()):
        self.events = list(events)  # still columns, so the CSV keeps one header; always empty

    def wrap(self, cmd, scratch):
        return list(cmd)

    def collect(self, scratch):
        return {event: None for event in self.events}
