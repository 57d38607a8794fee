"""What each Space holds, counted for its quotas (docs/spec/host-features.md#hf-neighbours; ``services.quotas``).

One row per Space, kept exact by the statements that change what it counts, so that a quota check
is one primary-key read, never a count over a table:

* ``live_instances`` (instances not ``complete``/``errored``/``terminated``), ``stored_events``
  (accepted, unconsumed sendEvent events: the sum of ``instances.inbox_count``) and the instances'
  share of ``log_bytes`` (the sum of ``instances.log_bytes``) are maintained by triggers on
  ``instances`` (migrations ``0005_space_quotas``, ``0006_space_usage_update_trigger``): every insert, update and delete of
  instances (creates, engine commits, terminations, retention and DELETE purges) adjusts them in
  the same transaction (inserts and deletes once per statement; an update by a row trigger that
  fires only when it changes a counted column — keep such updates to one row per statement, so
  the instance row is always locked before its Space's usage row);
* ``log_bytes`` also counts cron deliveries' lines, added by the delivery log statement
  (``models.log_sql``), and ``version_code_bytes`` (the module sources of live WorkerVersions)
  is charged when a Version is accepted and released when its delete is applied
  (``services.quotas``).

A log line counts ``octet_length(message) + models.log_sql.LINE_OVERHEAD_BYTES``.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base


class SpaceUsage(Base):
    """The counters of one Space (see module doc); every count is ≥ 0, bytes in bytes."""

    __tablename__ = "space_usage"

    space: Mapped[str] = mapped_column(sa.String(63), primary_key=True)
    live_instances: Mapped[int] = mapped_column(sa.BigInteger(), default=0, server_default="0")
    stored_events: Mapped[int] = mapped_column(sa.BigInteger(), default=0, server_default="0")
    log_bytes: Mapped[int] = mapped_column(sa.BigInteger(), default=0, server_default="0")
    version_code_bytes: Mapped[int] = mapped_column(sa.BigInteger(), default=0, server_default="0")
