#!/usr/bin/env bash
# Regenerate the single initial migration from the models (pre-release only: no deployed
# database has applied it yet). Uses a scratch database on the local Postgres.
set -euo pipefail
cd "$(dirname "$0")/.."
db="takohost_regen_$$"
psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $db" >/dev/null
trap 'psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db" >/dev/null' EXIT
rm -f models/migrations/versions/0001_initial.py
.venv/bin/python - "$db" <<'PY'
import sys
from alembic import command
from models.migrate import alembic_config
cfg = alembic_config(f"postgresql+psycopg://postgres@127.0.0.1:5432/{sys.argv[1]}")
command.revision(cfg, message="initial schema", autogenerate=True, rev_id="0001_initial")
PY
mv models/migrations/versions/0001_initial_*.py models/migrations/versions/0001_initial.py
sed -i 's/models\.base\.\(UTCDateTime\|ScalarText\)()/models.base.\1()/g' models/migrations/versions/0001_initial.py
.venv/bin/ruff format -q models/migrations/versions/0001_initial.py
.venv/bin/ruff check -q --fix models/migrations/versions/0001_initial.py || true
echo "regenerated models/migrations/versions/0001_initial.py"
