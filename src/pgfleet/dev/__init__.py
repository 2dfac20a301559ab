"""The embedded PostgreSQL server of `pgfleet dev` and the quick start."""
