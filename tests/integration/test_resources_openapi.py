"""``GET /v2/openapi.json``: a valid OpenAPI 3 document, from the request schemas, covering every route."""

from __future__ import annotations

import re

from openapi_spec_validator import validate


def test_openapi_document_is_served_without_token_and_is_valid(client):
    response = client.get("/v2/openapi.json")
    assert response.status_code == 200
    document = response.get_json()
    validate(document)
    assert document["openapi"].startswith("3.")


def test_every_route_of_the_app_is_documented(app, client):
    document = client.get("/v2/openapi.json").get_json()

    def shape(path: str) -> str:
        return re.sub(r"\{[^}]+\}", "{}", path)

    documented = {shape(p): set(ops) for p, ops in document["paths"].items()}
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.endpoint.startswith("ui."):
            continue  # the web console (/ui/) is HTML pages for people, not part of the API
        path = shape(re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule))
        assert path in documented, f"{rule.rule} is not in the OpenAPI document"
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in documented[path], f"{method} {rule.rule} is not documented"


def test_form_spec_schemas_are_closed_and_match_validation(client):
    components = client.get("/v2/openapi.json").get_json()["components"]["schemas"]
    for name in (
        "ModuleWorkerSpec",
        "WorkerVersionSpec",
        "WorkerDeploymentSpec",
        "DurableWorkflowSpec",
        "WorkerCronTriggerSpec",
        "Reference",
        "DeploymentEntry",
        "WorkflowBinding",
        "CreateResourceBody",
        "UpdateResourceBody",
    ):
        assert components[name]["additionalProperties"] is False, name
    assert components["DurableWorkflowSpec"]["required"] == ["className", "worker"]
    assert components["DeploymentEntry"]["properties"]["weight"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
    }
    assert components["WorkerDeploymentSpec"]["properties"]["versions"]["maxItems"] == 10
    assert len(components["CreateResourceBody"]["properties"]["spec"]["oneOf"]) == 5


def test_every_documented_operation_is_routed_to_its_view(app, client):
    """The other direction: each path and method of the document matches a URL rule of the app
    (with a sample value for each path parameter, an instance id holding an encoded slash)."""
    from host_api import apidoc

    samples = {"space": "s", "uid": "u", "op_id": "o", "instance_id": "a%2Fb", "scheduledTime": "t"}
    adapter = app.url_map.bind("localhost")
    document = client.get("/v2/openapi.json").get_json()
    for path, item in document["paths"].items():
        url = re.sub(r"\{([^}]+)\}", lambda m: samples[m[1]], path)
        for method in set(item) - {"parameters"}:
            endpoint, args = adapter.match(url, method=method.upper())
            assert apidoc.of(app.view_functions[endpoint]).summary == item[method]["summary"], (method, path)
            if "instance_id" in args:
                assert args["instance_id"] == "a/b"
