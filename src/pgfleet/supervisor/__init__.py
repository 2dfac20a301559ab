"""The supervisor of one host (`pgfleet run`): the arbiter (arbiter.py) and the steps it
takes (children, restarts, draining, stopping). What it shares with its children (beacon,
rescue pipe, exit codes) is in pgfleet/runtime. Nothing is imported here: the arbiter
loads prometheus-client, which reads PROMETHEUS_MULTIPROC_DIR at import, so `pgfleet run`
imports it only once that variable is set."""
