"""``truss-files index``: embed the notes that have no vector yet, with progress on stderr.

A semantic or hybrid query embeds at most a few notes itself (``recall.bounds.EMBED_IN_QUERY``)
and otherwise says to run this; a long-lived process (``serve``, ``mcp``) embeds new notes as
they are written, imported or synced once it has asked such a query.
"""

from __future__ import annotations

from .app import Ctx, cli, handled, pass_ctx
from .output import FORMAT_OPTION, emit
from .progress import Progress, enabled, interruptible

__all__ = ["index_cmd"]


@cli.command("index")
@FORMAT_OPTION
@pass_ctx
@handled
def index_cmd(obj: Ctx, fmt: str | None) -> None:
    """Embed every note that has no vector yet, for semantic and hybrid recall.

    Uses the store's embedder ([recall] embedder; needs the semantic extra). Notes already
    embedded are skipped, so running it again is quick; an interrupted run keeps what it
    embedded. Progress goes to stderr on a terminal.

    \b
    Example:
      truss-files index
      truss-files query "why are builds slow" --mode hybrid
    """
    store = obj.store()
    progress = Progress("index", enabled(fmt == "json"))
    state = {"done": 0, "missing": 0}

    def heard(done: int, missing: int) -> None:
        if not state["missing"] and missing:
            progress.phase("embedding notes", missing)
        progress.advance(done - state["done"])
        state["done"], state["missing"] = done, missing

    def stopped() -> str:
        return (
            f"interrupted: {state['done']} of {state['missing']} notes embedded and kept; "
            "run `truss-files index` again for the rest"
        )

    with interruptible(progress, stopped):
        progress.phase("loading the embedder and listing the notes")
        done = store.index(progress=heard)
    emit(
        fmt,
        {"embedded": done.embedded, "notes": done.notes, "embedder": done.embedder},
        f"embedded {done.embedded} notes ({done.notes} at the tip, {done.embedder})",
    )
