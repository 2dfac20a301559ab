"""The fleet's status as one structure, read by `pgfleet status` and the web UI."""
