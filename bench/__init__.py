"""Tools that measure the harness itself (bench/README.md lists them). Not part of the product:
nothing in harness/ or remote_agent/ imports from here. Scripts run as ``python3 bench/NAME.py``;
the probes as ``python3 -m bench.probes.NAME`` from the repository root."""
