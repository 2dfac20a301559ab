"""What every child process of the supervisor shares: its base class, heartbeat, exit
codes, process groups, signals and logs."""
