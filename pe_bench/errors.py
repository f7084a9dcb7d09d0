"""The error every layer raises for bad input: one line that names the problem and the fix."""


class ConfigError(ValueError):
    """A user-facing configuration problem; its message is one line that names the fix."""
