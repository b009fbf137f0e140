"""A deadline for a request's headers: a client that sends them slowly is dropped (slow loris).

uvicorn has no setting for it: its keep-alive timer runs only between requests and stops at
the first byte of the next one, so a client that sends one header line every few seconds
holds its connection (a file descriptor, a slot of the event loop) open for as long as it
likes. ``HeaderDeadline`` is uvicorn's own h11 protocol with one timer more: armed when a
connection opens and when the first byte of a later request arrives, cancelled once h11 has
the request's whole head (the client's state leaves IDLE), and when it fires the connection
is closed. The body has its own limit (``serve --body-timeout``, in the app); the time between
requests is uvicorn's keep-alive timeout.

``serve`` always runs this protocol (h11 is a dependency of uvicorn; httptools, when
installed, is not used), with ``DeadlineConfig.header_timeout`` seconds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT = 5.0


class DeadlineConfig(uvicorn.Config):
    """uvicorn's configuration with the header deadline (picklable for ``--workers N``)."""

    def __init__(
        self, *args: Any, header_timeout: float = DEFAULT_HEADER_TIMEOUT, **kwargs: Any
    ) -> None:
        kwargs.setdefault("http", HeaderDeadline)
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout


class HeaderDeadline(H11Protocol):
    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.header_timeout = float(getattr(config, "header_timeout", DEFAULT_HEADER_TIMEOUT))
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
        elif self.conn.their_state is h11.IDLE:
            # Part of a request's head: the clock runs from its first byte, and is not reset
            # by later ones.
            if self._deadline is None:
                self._arm()
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        # Between requests the keep-alive timeout governs; a pipelined request's head already
        # here is handled (and its deadline armed, if it is partial) by the next data_received
        # or the keep-alive timer, whichever comes first.
        self._disarm()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.close()
