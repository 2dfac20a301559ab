"""The example application of the quick start (see examples/README.md)."""
