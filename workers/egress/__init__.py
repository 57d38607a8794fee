"""Public egress of tenant code: the operator's rules (``config``), the proxy process every
context's only way out goes through (``proxy``) and the worker's client of it (``client``)."""
