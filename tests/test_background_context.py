"""Background work does not run in the caller's context (LangChain.js #9455, deepagentsjs #629).

A summary started while an agent run is streaming must not see that run's context
variables (LangChain keeps its callbacks, and so what streams to the user, in them).
"""

from __future__ import annotations

import asyncio
import contextvars

from ctxwindow.compress.background import Background

run: contextvars.ContextVar[str] = contextvars.ContextVar("run", default="none")


def test_work_on_the_background_thread_sees_none_of_the_callers_variables() -> None:
    seen: list[str] = []

    async def work() -> None:
        seen.append(run.get())

    background = Background()
    token = run.set("the agent run's callbacks")
    try:
        assert background.submit(work)
        assert background.wait(10)
    finally:
        run.reset(token)
        background.close()
    assert seen == ["none"]


def test_work_on_the_running_loop_sees_none_of_the_callers_variables() -> None:
    seen: list[str] = []

    async def work() -> None:
        seen.append(run.get())
        run.set("set by the summary")  # and nothing it sets leaks back

    async def caller() -> str:
        background = Background()
        run.set("the agent run's callbacks")
        assert background.submit(work)
        await background.drain()
        background.close()
        return run.get()

    assert asyncio.run(caller()) == "the agent run's callbacks"
    assert seen == ["none"]
