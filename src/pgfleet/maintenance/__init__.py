"""The maintenance process: rescues, retries of crashed attempts, pruning, the supervisor's row."""
