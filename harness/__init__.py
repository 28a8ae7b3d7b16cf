"""harness: cross-device kernel benchmarking and autotuning (host side)."""

__version__ = "0.1.0"
