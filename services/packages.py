"""Which package layers exist and which WorkerVersions use them (``models.packages``;
docs/packages.md): recorded when a Version's Operation installed its layer, counted per Space
(:func:`space_layer_bytes`, for quotas), and forgotten by the sweep a grace period after the last
live Version using a layer was deleted (:func:`sweep_txn`).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import postgresql

from models import db as models_db
from models import packages as pkg_models
from models import resources as res_models

__all__ = [
    "UNUSED_GRACE",
    "record_version_layer_txn",
    "space_layer_bytes",
    "space_layer_bytes_txn",
    "sweep_txn",
]

#: How long a layer no live Version uses is kept before the sweep removes it: a context that
#: picked a Version just before its deletion still imports from it, and a Version re-created
#: with the same pins finds it installed.
UNUSED_GRACE = dt.timedelta(hours=1)


def record_version_layer_txn(
    session: orm.Session,
    *,
    version_uid: str,
    space: str,
    key: str,
    requirements: list[str],
    packages: list[dict],
    size_bytes: int,
) -> None:
    """Record that WorkerVersion ``version_uid`` of ``space`` uses layer ``key`` (its canonical
    ``requirements``, the ``packages`` pip installed, ``size_bytes`` on disk): the layer row is
    inserted once (``ON CONFLICT DO NOTHING``) and marked used again; idempotent (a reconcile may
    run twice)."""
    session.execute(
        postgresql.insert(pkg_models.PackageLayer)
        .values(key=key, requirements=requirements, packages=packages, size_bytes=size_bytes)
        .on_conflict_do_update(index_elements=["key"], set_={"unused_since": None})
    )
    session.execute(
        postgresql.insert(pkg_models.VersionPackages)
        .values(version_uid=version_uid, space=space, layer_key=key)
        .on_conflict_do_nothing(index_elements=["version_uid"])
    )


def _live_users():
    return (
        sa.select(pkg_models.VersionPackages.layer_key)
        .join(res_models.Resource, res_models.Resource.uid == pkg_models.VersionPackages.version_uid)
        .where(res_models.Resource.deleted_at.is_(None))
    )


def space_layer_bytes_txn(session: orm.Session, *, space: str) -> int:
    """Bytes on disk of the distinct layers that live Versions of ``space`` use (a layer shared
    by two of its Versions counts once; one shared with another Space counts for both)."""
    keys = _live_users().where(pkg_models.VersionPackages.space == space).distinct().subquery()
    total = session.scalar(
        sa.select(sa.func.coalesce(sa.func.sum(pkg_models.PackageLayer.size_bytes), 0)).where(
            pkg_models.PackageLayer.key.in_(sa.select(keys.c.layer_key))
        )
    )
    return int(total or 0)


def space_layer_bytes(space: str) -> int:
    """:func:`space_layer_bytes_txn` in a session of its own."""
    with models_db.session_scope() as session:
        return space_layer_bytes_txn(session, space=space)


def space_uses_layer(space: str, key: str) -> bool:
    """Whether a live WorkerVersion of ``space`` already uses layer ``key`` (then a further
    Version with the same pins adds no layer bytes to the Space's quota)."""
    with models_db.session_scope() as session:
        found = session.scalar(
            _live_users()
            .where(pkg_models.VersionPackages.space == space, pkg_models.VersionPackages.layer_key == key)
            .limit(1)
        )
        return found is not None


def sweep_txn(session: orm.Session, *, now: dt.datetime, grace: dt.timedelta = UNUSED_GRACE) -> list[str]:
    """Forget what deleted Versions used; mark layers no live Version uses (``unused_since``),
    unmark those used again, and delete the rows of layers unused for longer than ``grace``.
    Returns the deleted layers' keys (the caller removes their directories after commit)."""
    session.execute(
        sa.delete(pkg_models.VersionPackages).where(
            pkg_models.VersionPackages.version_uid.in_(
                sa.select(res_models.Resource.uid).where(res_models.Resource.deleted_at.is_not(None))
            )
        )
    )
    used = _live_users()
    session.execute(
        sa.update(pkg_models.PackageLayer)
        .where(pkg_models.PackageLayer.key.in_(used), pkg_models.PackageLayer.unused_since.is_not(None))
        .values(unused_since=None)
    )
    session.execute(
        sa.update(pkg_models.PackageLayer)
        .where(pkg_models.PackageLayer.key.not_in(used), pkg_models.PackageLayer.unused_since.is_(None))
        .values(unused_since=now)
    )
    removed = session.scalars(
        sa.delete(pkg_models.PackageLayer)
        .where(
            pkg_models.PackageLayer.unused_since < now - grace,
            pkg_models.PackageLayer.key.not_in(sa.select(pkg_models.VersionPackages.layer_key)),
        )
        .returning(pkg_models.PackageLayer.key)
    ).all()
    return list(removed)


def known_keys_txn(session: orm.Session) -> set[str]:
    """Every layer key the database records (a local layer not among them is an orphan)."""
    return set(session.scalars(sa.select(pkg_models.PackageLayer.key)).all())
