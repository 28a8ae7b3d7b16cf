"""User-facing errors: the CLI prints one line and exits with code 2."""


class HarnessError(Exception):
    """Bad input or an unusable environment; the message is the whole story."""

    def __init__(self, message, where=None):
        self.where = where
        super().__init__("%s: %s" % (where, message) if where else message)
