"""A small shop back office whose slow work runs as pgfleet jobs."""
