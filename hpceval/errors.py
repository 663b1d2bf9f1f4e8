"""The one error base of hpceval, and config errors that name the key path and the fix.

A leaf module (it imports nothing of hpceval), so every layer raises the same kind of error and
the CLI handles them in one place: the message, the fix, and the exit status come with it.
"""

from __future__ import annotations

from dataclasses import dataclass


class HpcevalError(Exception):
    """A failure the user can act on: what went wrong, how to fix it, and the exit status."""

    exit_code: int = 1

    def __init__(self, message: str, fix: str = "", exit_code: int | None = None) -> None:
        self.message, self.fix = message, fix
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__(f"{message} (fix: {fix})" if fix else message)


def one_line(text: str) -> str:
    """Non-printable characters (newlines, NUL, bidi marks) as escapes: a value or key quoted
    in a message can neither continue it on a new line nor reorder what the terminal shows."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a run configuration."""

    path: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return one_line(f"{text} (fix: {self.fix})" if self.fix else text)


class ConfigError(HpcevalError):
    """A configuration that must not be submitted. Carries every issue found, not just the first."""

    exit_code = 2

    def __init__(self, issues: list[ConfigIssue] | ConfigIssue) -> None:
        self.issues = [issues] if isinstance(issues, ConfigIssue) else list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))

    @classmethod
    def at(cls, path: str, message: str, fix: str = "") -> ConfigError:
        return cls(ConfigIssue(path, message, fix))
