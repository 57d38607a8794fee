"""The exchange-rate API, called with ``requests`` (a third-party package the Version pins in
``takohost.toml``; the host installs it, docs/packages.md). The call leaves the sandbox through
the host's egress proxy like any public HTTP request (docs/egress.md)."""

from __future__ import annotations

import requests


def fetch_rate(api_url, base, quote):
    """The rate of ``quote`` per unit of ``base``: ``{"base", "quote", "rate", "date"?}``.
    A non-2xx answer raises (the step fails and is retried by its policy)."""
    answer = requests.get(api_url, params={"from": base, "to": quote}, timeout=10)
    answer.raise_for_status()
    body = answer.json()
    return {"base": base, "quote": quote, "rate": float(body["rates"][quote]), "date": body.get("date")}
