"""The `pgfleet` command line: each command parses, loads and calls one function.

`common` holds what every command shares; each other module holds one command group;
`root` assembles them."""

from pgfleet.cli.root import cli, main

__all__ = ["cli", "main"]
