"""One module per command; harness/cli.py puts them on the app."""
