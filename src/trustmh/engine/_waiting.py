"""Tasks waiting their turn, first come, first served: the one queue the endpoint's limiter (new requests,
and retries ahead of them) and the models' generation share both park their callers in."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Callable


class WaitQueue:
    """Callers parked until they are let go, in the order they came. A caller cancelled while parked leaves
    the queue; one cancelled after it was let go but before it ran gives its turn back (`on_lost`), so a
    turn is never lost to a cancellation."""

    def __init__(self) -> None:
        self._parked: collections.deque[asyncio.Future[None]] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._parked)

    def __len__(self) -> int:
        return len(self._parked)

    async def wait(self, on_lost: Callable[[], None], parked: Callable[[], None] = lambda: None) -> None:
        """Park until `let_go` picks this caller; `parked` is called once it is in the queue (a caller that
        may be let go at once: a pause over, room made meanwhile)."""
        fut = asyncio.get_running_loop().create_future()
        self._parked.append(fut)
        parked()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                on_lost()  # let go, then cancelled before it could use its turn: hand the turn on
            else:
                with contextlib.suppress(ValueError):
                    self._parked.remove(fut)
            raise

    def let_go(self, before: Callable[[], None] = lambda: None) -> bool:
        """Let the first caller still waiting go, `before` called just ahead of it (what its turn takes);
        False when nobody is waiting."""
        while self._parked:
            fut = self._parked.popleft()
            if not fut.done():
                before()
                fut.set_result(None)
                return True
        return False
