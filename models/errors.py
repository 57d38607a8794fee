"""The one root of domain errors shared by services, workers and the API (docs/spec/house-rules.md#hr-errors).

``code`` is the snake_case code of docs/spec/http-api.md#api-errors; the HTTP layer maps codes to statuses
in one table (``host_api.errors``). No HTTP knowledge here.
"""

from __future__ import annotations


class DomainError(Exception):
    """A rule said no. ``code`` (docs/spec/http-api.md#api-errors), human ``message``, optional ``details``."""

    def __init__(self, code: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def __repr__(self) -> str:
        return f"DomainError({self.code!r}, {self.message!r})"
