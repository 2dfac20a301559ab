"""The cron process: enqueues each schedule's jobs once across every host."""
