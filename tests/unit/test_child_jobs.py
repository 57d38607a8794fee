"""Pieces of the child's jobs (``takohost.runtime.child.jobs``) that need no process: what counts
as a workflow class, the import error line, the scheduled handler's ``ctx``, and the zygote's
warm-up leaving nothing behind. The jobs themselves run in real children in
``tests/integration/test_child_runtime.py``."""

from __future__ import annotations

import asyncio
import sys

import pytest

from takohost.runtime.child import importer, jobs


def test_a_workflow_class_is_a_class_constructible_with_one_argument_with_a_run():
    class One:
        def __init__(self, env): ...
        def run(self, event, step): ...

    class Two:
        def __init__(self, env, other): ...
        def run(self, event, step): ...

    class NoRun:
        def __init__(self, env): ...

    assert jobs.is_workflow_class(One)
    assert not jobs.is_workflow_class(Two) and not jobs.is_workflow_class(NoRun)
    assert not jobs.is_workflow_class(One(None))  # an instance, not a class


def test_the_import_error_line_names_the_versions_file_and_line():
    finder = importer.SourceModules({"badmain.py": "X = 1\nundefined_name\n"})
    finder.install()
    try:
        with pytest.raises(NameError) as info:
            finder.load("badmain")
    finally:
        sys.meta_path.remove(finder)
    assert jobs.last_traceback_line(info.value) == (
        "NameError: name 'undefined_name' is not defined (badmain.py, line 2)"
    )


def test_wait_until_takes_awaitables_and_callables_and_drains_every_failure():
    ctx = jobs.ScheduledContext()
    ran: list[str] = []

    async def later():
        ran.append("awaitable")

    def fails():
        raise ValueError("callable failed")

    ctx.wait_until(later())
    ctx.wait_until(lambda: ran.append("callable"))
    ctx.wait_until(fails)
    with pytest.raises(TypeError):
        ctx.wait_until(42)
    failures: list[BaseException] = []
    asyncio.run(ctx.drain(failures))
    assert ran == ["awaitable", "callable"]
    assert [str(f) for f in failures] == ["callable failed"]


def test_the_warm_up_leaves_no_module_or_finder_behind():
    meta_path = list(sys.meta_path)
    jobs.warm_up(rounds=2)
    assert sys.meta_path == meta_path
    assert jobs._WARM_UP_MODULE not in sys.modules
