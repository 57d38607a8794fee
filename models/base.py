"""Declarative base, column types and the constraint naming convention (Postgres only: the
embedded default is a real PostgreSQL, docs/spec/architecture.md#ar-embedded)."""

from __future__ import annotations

import datetime as dt
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Root of every mapped class; its ``metadata`` is what Alembic compares against."""

    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    #: Every mapping here is of a ``Table`` (SQLAlchemy types it as any ``FromClause``).
    __table__: ClassVar[sa.Table]


class ScalarText(sa.types.TypeDecorator):
    """A ``str`` of Unicode scalar values stored as its UTF-8 bytes.

    Instance ids, step names and event types may contain any scalar value, U+0000 included
    (docs/spec/durable-workflow.md#dw-instance-id: "idは1〜256 Unicodeスカラー値"); Postgres ``text`` cannot hold NUL, ``bytea``
    can, and equality/uniqueness on the bytes equals equality on the strings.
    """

    impl = sa.LargeBinary
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> bytes | None:
        return None if value is None else value.encode("utf-8")

    def process_result_value(self, value: bytes | None, dialect: sa.Dialect) -> str | None:
        return None if value is None else bytes(value).decode("utf-8")


class UTCDateTime(sa.types.TypeDecorator):
    """A timezone-aware UTC ``datetime`` (``timestamptz``); a naive one is refused when bound."""

    impl = sa.DateTime
    cache_ok = True

    def __init__(self, timezone: bool = True) -> None:
        super().__init__(timezone=True)

    def process_bind_param(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.UTC)

    def process_result_value(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        return None if value is None else value.astimezone(dt.UTC)


#: JSON stored as text (Postgres ``json``, not ``jsonb``): ``jsonb`` rejects ``\u0000`` in strings,
#: which documents may contain. Python ``None`` is SQL NULL ("no document").
JSONText = sa.JSON(none_as_null=True)


def utcnow() -> dt.datetime:
    """The current time as an aware UTC datetime."""
    return dt.datetime.now(dt.UTC)
