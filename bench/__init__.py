"""pgfleet's benchmark suite (issue 6): `python -m bench.run --quick` or `python -m bench.run`."""
