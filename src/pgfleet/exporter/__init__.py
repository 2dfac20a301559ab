"""The metrics process: serves /metrics, /livez and /readyz."""
