"""Plain values every layer shares: durations, rates, cron expressions, payload checks.
No I/O."""
