"""``host_api.routing``: the raw-path URL map and the ``<segment:…>`` converter, on a bare app."""

from __future__ import annotations

import flask
import pytest

from host_api import routing

RULE = "/v2/spaces/<segment:space>/resources/<segment:uid>/instances/<segment:instance_id>"


@pytest.fixture()
def client():
    app = routing.App("routing-test")
    routing.configure(app)

    @app.get(RULE)
    def one(space, uid, instance_id):  # noqa: ANN001, ANN202
        if isinstance(instance_id, routing.Undecodable):
            return {"undecodable": instance_id.raw}
        return {"space": space, "uid": uid, "id": instance_id, "path": flask.request.path}

    @app.get("/v2/spaces/<space>/other/<name>")
    def other(space, name):  # noqa: ANN001, ANN202
        return {"name": name}

    return app.test_client()


@pytest.mark.parametrize("raw, decoded", [
    ("a%2Fb", "a/b"), ("a%2fb", "a/b"), ("%252F", "%2F"), ("%3Fx%3D1", "?x=1"), ("%F0%9F%98%80", "\U0001f600"),
    ("%00", "\x00"), ("", ""), ("%2E%2E", ".."),
])
def test_an_encoded_segment_reaches_the_view_decoded_once(client, raw, decoded):
    answer = client.get(f"/v2/spaces/s/resources/u/instances/{raw}")
    assert answer.status_code == 200 and answer.get_json()["id"] == decoded


def test_space_and_uid_segments_are_decoded_too(client):
    answer = client.get("/v2/spaces/s%2Dx/resources/u%41/instances/i").get_json()
    assert (answer["space"], answer["uid"]) == ("s-x", "uA")


def test_a_segment_that_is_not_utf8_is_undecodable(client):
    assert client.get("/v2/spaces/s/resources/u/instances/%FFx").get_json() == {"undecodable": "%FFx"}


def test_a_slash_in_the_raw_path_still_splits(client):
    assert client.get("/v2/spaces/s/resources/u/instances/a/b").status_code == 404


def test_an_encoded_slash_in_the_literal_part_matches_no_instance_rule(client):
    assert client.get("/v2/spaces/s/resources/u/instances%2Fa").status_code == 404


def test_without_a_raw_target_the_decoded_path_is_requoted(client):
    no_raw = {"RAW_URI": None, "REQUEST_URI": None}
    answer = client.get("/v2/spaces/s/resources/u/instances/a%25b", environ_overrides=no_raw)
    assert answer.get_json()["id"] == "a%b"
    # The limit of such a server: a decoded '%2F' cannot be told from a slash.
    assert client.get("/v2/spaces/s/resources/u/instances/a%2Fb", environ_overrides=no_raw).status_code == 404


def test_an_absolute_form_target_and_its_query_are_cut(client):
    raw = "http://example.test/v2/spaces/s/resources/u/instances/a%2Fb?x=%2F"
    answer = client.get("/v2/spaces/s/resources/u/instances/a%2Fb", query_string="x=%2F",
                        environ_overrides={"RAW_URI": raw, "REQUEST_URI": raw})
    assert answer.get_json()["id"] == "a/b"


def test_other_routes_keep_the_decoded_path(client):
    assert client.get("/v2/spaces/s/other/a%2Db").get_json() == {"name": "a-b"}


def test_only_matching_sees_the_raw_path(client):
    assert client.get("/v2/spaces/s/resources/u/instances/a%2Fb").get_json()["path"] == (
        "/v2/spaces/s/resources/u/instances/a/b"
    )


def test_a_plain_flask_app_is_refused():
    with pytest.raises(TypeError):
        routing.configure(flask.Flask("plain"))


def test_raw_path_strips_the_script_name():
    environ = {"SCRIPT_NAME": "/api", "RAW_URI": "/api/v2/spaces/s/resources/u/instances/a%2Fb?q", "PATH_INFO": "x"}
    assert routing.raw_path(environ) == "/v2/spaces/s/resources/u/instances/a%2Fb"
