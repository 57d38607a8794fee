"""Tenant log lines of instances and cron deliveries (docs/spec/host-features.md#hf-observability; limits in
``takohost.domain.tenant_logs``).

One row per line. A line belongs to exactly one owner: an instance (``instance_pk``, with the
context's ``epoch`` and the ``step``/``attempt`` running when it was written) or a cron delivery
(``delivery_pk``). ``seq`` numbers an owner's lines 1, 2, 3 …; the oldest are deleted beyond
``MAX_STORED_LINES``, so ``first seq - 1`` lines were removed. Both foreign keys cascade: a
retention purge or a DELETE of the instance (or the delivery) removes its lines in the same
statement. ``stream`` ∈ stdout/stderr (tenant) and host (written by the host: markers, failures,
replay diagnostics).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, ScalarText, UTCDateTime, utcnow


class TenantLog(Base):
    """One captured line (see module doc)."""

    __tablename__ = "tenant_logs"
    __table_args__ = (
        sa.CheckConstraint("(instance_pk IS NULL) <> (delivery_pk IS NULL)", name="one_owner"),
        sa.Index(
            "ix_tenant_logs_instance_seq",
            "instance_pk",
            "seq",
            unique=True,
            postgresql_where=sa.text("instance_pk IS NOT NULL"),
        ),
        sa.Index(
            "ix_tenant_logs_delivery_seq",
            "delivery_pk",
            "seq",
            unique=True,
            postgresql_where=sa.text("delivery_pk IS NOT NULL"),
        ),
    )

    pk: Mapped[int] = mapped_column(sa.BigInteger(), primary_key=True, autoincrement=True)
    instance_pk: Mapped[int | None] = mapped_column(
        sa.ForeignKey("instances.pk", ondelete="CASCADE"), nullable=True
    )
    delivery_pk: Mapped[int | None] = mapped_column(
        sa.ForeignKey("cron_deliveries.pk", ondelete="CASCADE"), nullable=True
    )
    seq: Mapped[int] = mapped_column(sa.BigInteger())
    logged_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    epoch: Mapped[int | None] = mapped_column(sa.BigInteger(), nullable=True)
    step: Mapped[str | None] = mapped_column(ScalarText, nullable=True)
    attempt: Mapped[int | None] = mapped_column(sa.Integer(), nullable=True)
    stream: Mapped[str] = mapped_column(sa.String(8))
    message: Mapped[str] = mapped_column(sa.Text())
    #: Printed while the context replayed the steps its history recorded (``takohost instances
    #: logs`` hides these unless ``--replayed``): the same code printed it in an earlier context.
    replayed: Mapped[bool] = mapped_column(sa.Boolean(), default=False, server_default=sa.false())
