"""The one exception a configuration mistake raises, and the check that raises it."""

from __future__ import annotations


class ConfigError(ValueError):
    """A user mistake in the configuration: reported as one line, before any heavy work."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
