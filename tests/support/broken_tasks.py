"""A task module that exists but cannot be imported (a missing dependency)."""

import pgfleet_dependency_that_is_not_installed  # noqa: F401
