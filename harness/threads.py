"""Work on every machine of a target at once: one thread per machine."""

from __future__ import annotations

import threading
from typing import Callable, Iterable, List


def in_threads(function: Callable, items: Iterable) -> List[BaseException]:
    """``function(item)`` for every item, each in its own daemon thread; returns when all are done,
    with the exceptions they raised in the order they were raised (for the caller to re-raise in
    its own thread)."""
    errors = []

    def call(item):
        try:
            function(item)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(item,), daemon=True) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
