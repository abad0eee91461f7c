"""Precise exceptions. Each says what was wrong and what was kept."""

from __future__ import annotations


class TokenPilotError(Exception):
    """Base class for every error TokenPilot raises on purpose."""


class MessageError(TokenPilotError, ValueError):
    """A message does not follow the OpenAI Chat Completions shape."""

    def __init__(self, index: int | None, reason: str) -> None:
        self.index = index
        self.reason = reason
        where = f"message {index}" if index is not None else "messages"
        super().__init__(f"{where}: {reason}")


class ArtifactNotFound(TokenPilotError, KeyError):
    """No artifact with this id exists in this session."""

    def __init__(self, artifact_id: str, session_id: str) -> None:
        self.artifact_id = artifact_id
        self.session_id = session_id
        super().__init__(f"no artifact {artifact_id!r} in session {session_id!r}")

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence readable
        return self.args[0]


class ConfigError(TokenPilotError, ValueError):
    """A configuration value is out of range or of the wrong type."""


class StoreError(TokenPilotError, OSError):
    """The artifact store could not be written or read: a full disk, a locked or broken
    database. An `OSError`, like the file errors the store raises as they are, so one
    `except OSError` covers every store failure; `strerror` is the cause alone."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.strerror = reason
