"""Stopping background tasks for good (the server's loops around Redis and the database).

Under Python 3.11, ``asyncio.wait_for`` returns the awaited result instead of raising when a
cancellation arrives just as that result does (3.12 fixed it); redis-py awaits ``wait_for``
on every command it sends with a socket timeout. A task cancelled at that moment goes on as
if nothing had happened: a ``while True`` loop around a Redis command keeps running, and
whoever waits for the task to end waits for ever. Measured with the project's Redis client:
a loop of ``GET`` cancelled at a random moment carried on in 324 of 400 tries.

:func:`cancel_and_wait` cancels again until the task has ended; :func:`stop_if_cancelled`
ends a loop at the step where the cancellation was lost. A loop needs both: one that never
pauses between its commands can lose cancel after cancel on a loaded machine (seen here: a
loop of ``GET`` went on for more than 5 s of re-cancels), and a task that is not a loop of
ours is only reached by the cancel sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

RECANCEL_S = 0.01  # how often a task that carried on is cancelled again


async def cancel_and_wait(*tasks: asyncio.Task[Any]) -> None:
    """Cancel ``tasks`` and return once every one has ended, cancelling again any that went
    on. What they ended with (their result, their error) is theirs: it is not raised here."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
    for task in tasks:
        if not task.cancelled():
            with contextlib.suppress(Exception):
                task.exception()  # retrieved: a loop logs its own failures


def stop_if_cancelled() -> None:
    """Raise ``CancelledError`` when the running task was cancelled and an awaited call
    returned anyway (the ``wait_for`` race above): a loop calls it after each step."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
