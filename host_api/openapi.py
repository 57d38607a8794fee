"""The API's OpenAPI 3 document, generated with apispec from the marshmallow schemas."""

from __future__ import annotations

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin


def document() -> dict:
    """Build the OpenAPI 3.0 document (a dict)."""
    spec = APISpec(title="takohost Host API", version="2", openapi_version="3.0.3",
                   plugins=[MarshmallowPlugin()])
    return spec.to_dict()
