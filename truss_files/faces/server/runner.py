"""What a server process does besides answering requests: check its key, sync its clone.

A server signs with a key of its own that holds the agent and trainer roles and nothing more:
it writes unverified notes (in its members' names and the layers a task's grants allow),
never verdicts or configuration, so a stolen server key cannot promote a note or change who
may sign.

``SyncLoop`` keeps one clone of a shared remote in line with it (``serve --sync REMOTE``):
every few seconds, and soon after each write, it runs the same ``sync`` as the command line
-- fetch, audit every incoming commit, integrate, push by compare-and-swap. It holds the
store's writer lock while it integrates, so a train on this machine and an incoming merge
never race for the branch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ...errors import ConfigError, TrussError
from ...facade import MemoryStore
from ...git.gitlocks import flock
from ...signing import PublicKey

log = logging.getLogger("truss_files.http")
# What a server's key holds, exactly: it writes notes, in members' names and above the task.
SERVER_ROLES = ("agent", "trainer")


def check_server_key(store: MemoryStore) -> str:
    """The principal the server signs as; raises unless it holds agent and trainer and no
    other role."""
    key = PublicKey.from_line(store.signer.public_line)
    principal, roles = store.policy().roles_of(key)
    missing = [role for role in SERVER_ROLES if role not in roles]
    if missing:
        grants = " and ".join(f"`truss-files roles grant {r} {principal}`" for r in missing)
        raise ConfigError(
            f"the server's key ({principal}) lacks the {' and '.join(missing)} role"
            f"{'s' if len(missing) > 1 else ''}: it writes notes (agent) in members' names and "
            f"the layers a task's grants allow (trainer); an operator grants them with {grants}"
        )
    extra = sorted(roles - set(SERVER_ROLES))
    if extra:
        raise ConfigError(
            f"the server's key ({principal}) also holds {', '.join(extra)}; a server holds no "
            "secret beyond an agent and trainer key: make one (`truss-files keys new --name "
            "server`), add it with `truss-files signers add` and grant it the agent and "
            "trainer roles only"
        )
    return principal


def check_panel_key(store: MemoryStore) -> str:
    """The principal a server commits promotes and rejects as (``serve --panel-key``); raises
    unless that key holds the panel role."""
    try:
        return store.require_role({"panel"})
    except TrussError as exc:
        raise ConfigError(
            f"the server's panel key cannot commit a verdict's decision: {exc.message}; an "
            "operator grants it with `truss-files roles grant panel PRINCIPAL`, or leave "
            "--panel-key out (promote and reject then answer 403)"
        ) from exc


class SyncLoop:
    """A daemon thread that syncs ``store`` with ``remote`` every ``every`` seconds, and soon
    after ``poke()``."""

    def __init__(
        self,
        open_store: Callable[[], MemoryStore],
        remote: str,
        every: float,
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._open = open_store
        self.remote = remote
        self.every = every
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="truss-sync", daemon=True)
        self._on_error = on_error or (lambda text: log.warning("sync: %s", text))

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def once(self, store: MemoryStore) -> None:
        with flock(store.git.git_dir, "write.lock"):
            result = store.sync(self.remote)
        if result.integrated != "none" or result.pushed:
            log.info("sync: %s", result.summary())

    def _loop(self) -> None:
        store = self._open()
        while not self._stop.is_set():
            try:
                self.once(store)
            except TrussError as exc:
                self._on_error(exc.message)
            except Exception as exc:  # noqa: BLE001 - a sync bug must not end the server
                self._on_error(f"unexpected {type(exc).__name__}")
            self._wake.wait(self.every)
            self._wake.clear()
