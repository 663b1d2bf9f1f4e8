"""Config errors that name the key path and the fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a run configuration."""

    path: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{text} (fix: {self.fix})" if self.fix else text


class ConfigError(Exception):
    """A configuration that must not be submitted. Carries every issue found, not just the first."""

    exit_code = 2

    def __init__(self, issues: list[ConfigIssue] | ConfigIssue) -> None:
        self.issues = [issues] if isinstance(issues, ConfigIssue) else list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))

    @classmethod
    def at(cls, path: str, message: str, fix: str = "") -> ConfigError:
        return cls(ConfigIssue(path, message, fix))
