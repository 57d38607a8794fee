"""Host errors (docs/spec/worker-forms.md#wf-errors, docs/spec/durable-workflow.md#dw-errors "StepのHost Errorは…", case WF-11)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

import takohost
from takohost import errors

EXPECTED_NAMES = {
    "StepFailed": "step_failed",
    "WaitTimeout": "wait_timeout",
    "InstanceExists": "instance_exists",
    "UnknownInstance": "unknown_instance",
    "InvalidParams": "invalid_params",
    "DocumentTooLarge": "document_too_large",
    "InstanceTerminal": "instance_terminal",
    "EventQueueFull": "event_queue_full",
    "BackendUnavailable": "backend_unavailable",
}


@pytest.mark.parametrize(("class_name", "error_name"), sorted(EXPECTED_NAMES.items()))
def test_each_class_carries_the_seed_name(class_name: str, error_name: str) -> None:
    cls = getattr(takohost, class_name)
    error = cls("boom")
    assert isinstance(error, errors.HostError)
    assert isinstance(error, Exception)
    assert error.name == error_name
    assert error.message == "boom"
    assert str(error) == "boom"
    assert errors.ERROR_CLASSES[error_name] is cls


def test_error_classes_is_exactly_the_nine_names() -> None:
    assert set(errors.ERROR_CLASSES) == set(EXPECTED_NAMES.values())


@pytest.mark.parametrize("cls", list(errors.ERROR_CLASSES.values()))
def test_name_is_read_only(cls: type[errors.HostError]) -> None:
    error = cls("m")
    with pytest.raises(AttributeError):
        error.name = "run_threw"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del error.name  # type: ignore[misc]
    with pytest.raises(AttributeError):
        object.__setattr__(error, "name", "run_threw")
    # Even a value planted in the instance dict does not shadow the property.
    error.__dict__["name"] = "run_threw"
    assert error.name == cls.error_name


def test_WF_11_caught_step_failed_has_name_and_assigning_raises() -> None:
    try:
        raise takohost.StepFailed("effect failed 3 times")
    except Exception as caught:  # the user's except clause
        assert caught.name == "step_failed"  # type: ignore[attr-defined]
        with pytest.raises(AttributeError):
            caught.name = "x"  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", list(errors.ERROR_CLASSES.values()))
def test_pickle_round_trip(cls: type[errors.HostError]) -> None:
    original = cls("über ☃")
    copy = pickle.loads(pickle.dumps(original))
    assert type(copy) is cls
    assert copy.name == cls.error_name
    assert copy.message == "über ☃"
    assert copy.args == ("über ☃",)


def test_raise_e_preserves_identity() -> None:
    original = takohost.StepFailed("m")
    with pytest.raises(takohost.StepFailed) as outer:
        try:
            raise original
        except takohost.StepFailed as e:
            raise e  # noqa: TRY201 - the case under test: the same object re-raised
    assert outer.value is original


def test_base_class_cannot_be_raised_by_itself() -> None:
    with pytest.raises(TypeError):
        errors.HostError("m")


def test_error_from_name_builds_the_class() -> None:
    error = errors.error_from_name("wait_timeout", "no event within 5 s")
    assert type(error) is takohost.WaitTimeout
    assert error.message == "no event within 5 s"
    with pytest.raises(ValueError):
        errors.error_from_name("run_threw", "not a host error class")
    with pytest.raises(ValueError):
        errors.error_from_name(None, "x")  # type: ignore[arg-type]


def test_default_message_is_empty() -> None:
    assert takohost.InvalidParams().message == ""


def test_takohost_imports_with_the_standard_library_only() -> None:
    # -S: no site-packages; -I: isolated. The repo root on sys.path is all the sandbox provides.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from takohost import StepFailed, WaitTimeout; "
        "assert StepFailed('x').name == 'step_failed'; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('rfc8785', 'sqlalchemy', 'flask', 'celery')]; "
        "assert not bad, bad"
    )
    repo_root = str(__import__("pathlib").Path(takohost.__file__).resolve().parents[1])
    result = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code, repo_root], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
