"""The ``truss-files`` console script (``main``), and the import path of the click group.

Every command, ``query`` included, goes through the click group in ``faces/cli/app.py``; the group
imports only the module of the command being run. The names a command module or a test needs
(``main``, ``Ctx``, ``handled``, ...) are re-exported here, where callers have long found them.

Exit codes: 0 ok, 1 a user or tool error, 2 usage, 3 an unexpected bug, 141 the reader of
the output went away (``| head``, as git on SIGPIPE; ``output.reader_gone``).
"""

from __future__ import annotations

import gc

from .app import KINDS, LAYERS, TRUSTS, Ctx, LazyGroup, cli, handled, pass_ctx

__all__ = ["KINDS", "LAYERS", "TRUSTS", "Ctx", "LazyGroup", "cli", "handled", "main", "pass_ctx"]


def main() -> None:
    # A query answers and exits: the cyclic collector has nothing worth its passes over the
    # imported modules' objects, during the imports or at exit, where freezing them spares the
    # final collection (benchmarks/bench_cli.py). The group turns it back on for any other
    # command, which may run long (mcp, serve, verify).
    gc.disable()
    try:
        cli(prog_name="truss-files")
    finally:
        gc.freeze()
