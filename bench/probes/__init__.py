"""One-off probes kept for the measurements they made (docs/notes/ has them); run from the
repository root as ``python3 -m bench.probes.NAME``."""
