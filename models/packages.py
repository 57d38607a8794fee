"""Installed package layers and the WorkerVersions that use them (docs/spec/worker-forms.md#wf-version; docs/packages.md).

``package_layers``: one row per layer key (``takohost.domain.requirements.layer_key``: the
canonical pin set and the interpreter): the pins it was built from (``requirements``, canonical
lines), what pip installed (``packages``: ``[{"name", "version", "sha256"}]``), its size on disk
in bytes (``.pyc`` files included) and, once no live Version uses it, since when
(``unused_since``; the sweep removes it a grace period later, ``workers.packages.sweep``).

``version_packages``: which layer a WorkerVersion uses (one row per Version with requirements,
written when its Operation installed the layer; removed with the Version's row by cascade). A
layer's users are the rows whose Version is live (``resources.deleted_at IS NULL``).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, JSONText, UTCDateTime, utcnow


class PackageLayer(Base):
    """One installed, content-addressed layer (see the module docstring)."""

    __tablename__ = "package_layers"

    key: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    requirements: Mapped[list] = mapped_column(JSONText)
    packages: Mapped[list] = mapped_column(JSONText)
    size_bytes: Mapped[int] = mapped_column(sa.BigInteger())
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    unused_since: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class VersionPackages(Base):
    """The layer WorkerVersion ``version_uid`` (of ``space``) imports from."""

    __tablename__ = "version_packages"
    __table_args__ = (sa.Index("ix_version_packages_space", "space"),)

    version_uid: Mapped[str] = mapped_column(
        sa.ForeignKey("resources.uid", ondelete="CASCADE"), primary_key=True
    )
    space: Mapped[str] = mapped_column(sa.String(63))
    layer_key: Mapped[str] = mapped_column(sa.ForeignKey("package_layers.key"), index=True)
