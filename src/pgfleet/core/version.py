"""pgfleet's version, in a module of its own so that any process can name it without
importing the public API."""

VERSION = "0.1.0"
