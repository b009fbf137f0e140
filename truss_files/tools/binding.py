"""The ``memory`` tool (Anthropic's ``memory_20250818``) over a virtual ``/memories`` tree.

To a model it is the installed anthropic SDK's ``BetaLocalFilesystemMemoryTool``: the same
texts and errors, the same line numbering, sizes and two-level listings, file text kept byte
for byte (trailing newline, CRLF). ``tests/tools/test_binding_conformance.py`` runs the SDK's tool
beside this one at test time and lists, in one place, the only differences allowed.

The model sees files; the store keeps entries. A path names a kind and key: a first folder
that names a kind (``lessons`` or ``lesson``) gives the kind, the rest the key (``.md``
dropped); any other path keeps its whole relative path as the key, with the configured
default kind (``[tools] default_kind``, default ``fact``). Each entry written here records
the path the model used (``Entry.memory_path``) and is shown there and only there; an entry
written any other way shows at ``/memories/<kind>/<key>.md``. A folder exists while a file
below it does, and stays, empty, once delete or rename took its last file away, as the SDK's
directory does: the tombstone names the folder it emptied (``kept_folder``). Two paths that
name one entry (``lesson/x.md`` and ``lessons/x.md``) are one file at a time: creating the
second is refused with the first's path.

What a run sees: verified entries, plus its own unverified writes, marked with the only three
marks agents are promised (`` [unverified]`` after a listing line, ``[unverified] `` before a
file's header, one closing paragraph of a listing). Among several of one key the newest wins;
a tombstone that wins hides the key. Every write (create, str_replace, insert) makes a new
unverified entry; delete and rename write tombstones (and a moved copy) that take effect for
everyone once a panel verifies them.

Paths are checked strictly before anything else: only ``/memories`` and below; ``..``,
percent-encoded dots or slashes (also double-encoded), backslashes, NUL bytes, look-alike
characters and paths over ``MAX_PATH`` characters are refused; ``identity/`` and
``principals/`` are not reachable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BindingError, ConfigError, UsageError
from ..format import entryfile
from ..format.secrets import shown
from ..model import Entry, Kind, Trust, body_size
from .dispatch import seq_of
from .memory_paths import (
    DEFAULT_KIND,
    KIND_SEGMENTS,
    MAX_PATH,
    ROOT,
    VPath,
    entry_path,
    kept_folder,
    parent_folder,
    parse_path,
    shown_path,
)
from .registry import Annotations, Tool, register
from .write import commit_entries, is_tombstone, new_entry

if TYPE_CHECKING:
    from ..git.gitstore import Snapshot
    from .dispatch import Call

MAX_LINES = 999_999  # the SDK's limit on a viewed file
LINE_NUMBER_WIDTH = len(str(MAX_LINES))
# The SDK lists a folder with its st_size: 4096 for a small folder on ext4 and most local
# file systems. Folders here are not files, so they show what a model has seen most often.
FOLDER_SIZE = 4096
UNVERIFIED_MARK = "[unverified]"


def default_kind(call: Call) -> Kind:
    value = call.config.get("tools", "default_kind", DEFAULT_KIND.value)
    try:
        return Kind.parse(str(value))
    except UsageError as exc:
        raise ConfigError(f"truss.toml: tools.default_kind: {exc.message}") from None


# -- what a run sees ---------------------------------------------------------------------


@dataclass(frozen=True)
class Visible:
    entry: Entry
    own: bool  # this run's own unverified write

    @property
    def body(self) -> str:
        return self.entry.body

    @property
    def path(self) -> str:
        return shown_path(self.entry)

    @property
    def size(self) -> int:
        return body_size(self.entry.body)


@dataclass
class View:
    """The current visible entry of each (kind, key) for one run, built from one snapshot;
    ``kept``: the keys whose visible tombstone keeps the folder it emptied."""

    call: Call
    current: dict[tuple[Kind, str], Visible] = field(default_factory=dict)
    kept: dict[tuple[Kind, str], str] = field(default_factory=dict)

    @classmethod
    def build(cls, call: Call, entries: Iterable[Entry]) -> View:
        best: dict[tuple[Kind, str], tuple[tuple[Any, ...], Entry, bool]] = {}
        reader = call.reader()  # memory.scope: another agent's notes are no file here
        for entry in entries:
            if not reader.sees(entry.scope):
                continue
            own = call.own_unverified(entry)
            if not (own or (entry.trust is Trust.VERIFIED and entry.superseded_by is None)):
                continue
            seq = seq_of(entry, call.run_id) if own and call.run_id else 0
            rank = (entry.created, own, seq, entry.id)
            slot = (entry.kind, entry.key)
            if slot not in best or rank > best[slot][0]:
                best[slot] = (rank, entry, own)
        view = cls(call)
        for slot, (_, entry, own) in best.items():
            if not is_tombstone(entry):
                view.current[slot] = Visible(entry, own)
            elif (kept := kept_folder(entry)) is not None:
                view.kept[slot] = kept
        return view

    def slot(self, vp: VPath) -> Visible | None:
        """What holds the entry ``vp`` names, at whichever path it was written."""
        if vp.key is None or vp.kind is None:
            return None
        return self.current.get((vp.kind, vp.key))

    def file(self, vp: VPath) -> Visible | None:
        """The file at exactly this path."""
        item = self.slot(vp)
        return item if item is not None and item.path == vp.norm else None

    def under(self, vp: VPath) -> list[Visible]:
        """Visible files below a folder path (the root: all of them)."""
        prefix = vp.norm + "/"
        return [v for v in self.current.values() if v.path.startswith(prefix)]

    def kept_under(self, vp: VPath) -> dict[tuple[Kind, str], str]:
        """The kept empty folders at ``vp`` or below it, by the key that keeps each."""
        prefix = vp.norm + "/"
        return {s: f for s, f in self.kept.items() if f == vp.norm or f.startswith(prefix)}

    def holds(self, vp: VPath) -> bool:
        """Whether ``vp`` is a folder: the root, or a files' or a kept empty folder."""
        return vp.is_root or bool(self.under(vp) or self.kept_under(vp))


def _scan(call: Call, snap: Snapshot, kinds: Iterable[Kind], key: str | None) -> list[Entry]:
    """Entries that might be visible, read cheaply: a byte test before each full parse."""

    # The run's own and the runs it shares notes with (which of them are its own is decided
    # by signature in ``View.build``: ``Call.own_unverified``).
    view = call.run_view()
    runs = [f"run:{r}/".encode() for r in sorted(view.runs)] if view is not None else []
    needle = entryfile.key_line(key) if key is not None else None
    verified = b"\ntrust: verified\n"
    out = []
    for kind in kinds:
        for path, blob in snap.walk(f"memories/{kind.value}"):
            data = blob.data
            if needle is not None and needle not in data:
                continue
            if verified in data or any(run in data for run in runs):
                out.append(entryfile.parse(data, path))
    return out


def view_of(call: Call, kind: Kind | None, key: str | None = None) -> View:
    # The tree shows verified entries: none from a history the audit rejects.
    snap = call.store.open_read(Trust.VERIFIED, call.snapshot()).snap
    kinds = list(Kind) if kind is None else [kind]
    return View.build(call, _scan(call, snap, kinds, key))


def file_view(call: Call, vp: VPath) -> View:
    """What is needed to find the file at ``vp``: its own kind and key."""
    return view_of(call, vp.kind, vp.key)


def folder(call: Call, vp: VPath) -> View:
    """What is needed to see the folder ``vp``: a kind folder holds only its kind; any other
    folder may hold entries of every kind (written under another default kind)."""
    return view_of(call, vp.kind if vp.names_kind else None)


# -- the commands ------------------------------------------------------------------------


def _require(inp: Mapping[str, Any], command: str, *names: str) -> None:
    for name in names:
        if inp.get(name) is None:
            raise BindingError(f"Parameter `{name}` is required for command: {command}")


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(
        f"{str(n + start).rjust(LINE_NUMBER_WIDTH)}\t{line}" for n, line in enumerate(lines)
    )


def _size(n: int) -> str:
    """The SDK's file size text: 0B, 512B, 1.5K, 2M."""
    if n == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min(int(n.bit_length() - 1) // 10, len(units) - 1)
    size = n / (1024**i)
    return f"{int(size)}{units[i]}" if size == int(size) else f"{size:.1f}{units[i]}"


def _lines_keeping_cr(content: str) -> list[str]:
    """Lines split on LF only (a CR stays on its line), without the empty tail of a final LF."""
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _listing(shown: str, vp: VPath, view: View) -> str:
    """Two levels below the folder, in name order, each file at the path the model wrote."""
    base = vp.norm
    tree: dict[str, Any] = {}
    for kept in view.kept_under(vp).values():
        node = tree
        for part in kept[len(base) + 1 :].split("/") if kept != base else ():
            node = node.setdefault(part + "/", {})
    for item in view.under(vp):
        rel = item.path[len(base) + 1 :].split("/")
        node = tree
        for part in rel[:-1]:
            node = node.setdefault(part + "/", {})
        node[rel[-1]] = item
    lines = [f"{_size(FOLDER_SIZE)}\t{shown}"]
    marked = False

    def walk(node: dict[str, Any], rel: str, depth: int) -> None:
        nonlocal marked
        for name in sorted(node, key=lambda n: n.rstrip("/")):
            if name.startswith("."):
                continue
            child = node[name]
            path = f"{rel}{name}"
            if isinstance(child, dict):
                lines.append(f"{_size(FOLDER_SIZE)}\t{shown}/{path}")
                if depth < 2:
                    walk(child, path, depth + 1)
            else:
                line = f"{_size(child.size)}\t{shown}/{path}"
                if child.own:
                    line += f" {UNVERIFIED_MARK}"
                    marked = True
                lines.append(line)

    walk(tree, "", 1)
    header = (
        f"Here're the files and directories up to 2 levels deep in {shown}, excluding hidden items:"
    )
    text = header + "\n" + "\n".join(lines)
    if marked:
        text += (
            f"\n\n{UNVERIFIED_MARK} marks this run's own writes: not verified yet, and not seen "
            "by other runs until a panel verifies them."
        )
    return text


def _not_found(path: str) -> BindingError:
    return BindingError(
        f"The path {path} does not exist. Please provide a valid path.", "not_found"
    )


def cmd_view(call: Call, inp: Mapping[str, Any], dk: Kind) -> str:
    _require(inp, "view", "path")
    vp = parse_path(inp["path"], dk)
    if vp.key is not None:
        item = file_view(call, vp).file(vp)
        if item is not None:
            return _view_file(vp.text, item, inp.get("view_range"))
    view = folder(call, vp)
    if not view.holds(vp):
        raise _not_found(vp.text)
    return _listing(vp.text, vp, view)


def _view_file(path: str, item: Visible, view_range: Any) -> str:
    lines = shown(item.entry).body.split("\n")  # what the run sees, not what is stored
    if len(lines) > MAX_LINES:
        raise BindingError(f"File {path} exceeds maximum line limit of 999,999 lines.")
    start = 1
    if view_range is not None:
        if (
            not isinstance(view_range, list)
            or len(view_range) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
        ):
            raise BindingError(
                "`view_range` must be two line numbers [start, end] (end -1: to the end)"
            )
        first = max(1, view_range[0]) - 1
        end = len(lines) if view_range[1] == -1 else view_range[1]
        lines = lines[first:end]
        start = first + 1
    header = f"Here's the content of {path} with line numbers:"
    if item.own:
        header = f"{UNVERIFIED_MARK} {header}"
    return header + "\n" + _numbered(lines, start)


def _existing_file(call: Call, vp: VPath) -> Visible:
    """The file a command edits; the SDK's errors when there is none."""
    item = file_view(call, vp).file(vp) if vp.key is not None else None
    if item is not None:
        return item
    if folder(call, vp).holds(vp):
        raise BindingError(f"The path {vp.text} is not a file.", "not_a_file")
    raise _not_found(vp.text)


def _taken(item: Visible, path: str) -> BindingError:
    """Two paths that name one memory (``lesson/`` and ``lessons/``, ``x`` and ``x.md``):
    one of them at a time."""
    return BindingError(
        f"File {path} already exists as {item.path}: both paths name one memory. View or "
        f"edit {item.path}, or choose another name.",
        "already_exists",
    )


def _new_file(call: Call, vp: VPath, text: str) -> Entry:
    return new_entry(call, vp.kind, vp.key, text, memory_path=vp.norm)  # type: ignore[arg-type]


def cmd_create(call: Call, inp: Mapping[str, Any], dk: Kind) -> str:
    _require(inp, "create", "path", "file_text")
    vp = parse_path(inp["path"], dk)
    if folder(call, vp).holds(vp):
        raise BindingError(f"File {vp.text} already exists", "already_exists")
    if vp.key is None:
        raise BindingError(
            f"The path {vp.text} names a kind of memory, which is a folder; create a file "
            f"below it, such as {vp.norm}/notes.md",
            "not_a_file",
        )
    item = file_view(call, vp).slot(vp)
    if item is not None:
        if item.path == vp.norm:
            raise BindingError(f"File {vp.text} already exists", "already_exists")
        raise _taken(item, vp.text)
    entry = _new_file(call, vp, str(inp["file_text"]))
    commit_entries(call, [entry], f"memory create {vp.norm}")
    return f"File created successfully at: {vp.text}"


def cmd_str_replace(call: Call, inp: Mapping[str, Any], dk: Kind) -> str:
    _require(inp, "str_replace", "path", "old_str")
    vp = parse_path(inp["path"], dk)
    item = _existing_file(call, vp)
    old, new = str(inp["old_str"]), str(inp.get("new_str") or "")
    content = item.body
    count = content.count(old)
    if count == 0:
        raise BindingError(
            f"No replacement was performed, old_str `{old}` did not appear verbatim in {vp.text}.",
            "no_match",
        )
    if count > 1:
        lines, start = [], 0
        while (pos := content.find(old, start)) != -1:
            lines.append(content[:pos].count("\n") + 1)
            start = pos + 1
        raise BindingError(
            f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: "
            f"{', '.join(map(str, lines))}. Please ensure it is unique",
            "ambiguous",
        )
    changed_line = content[: content.find(old)].count("\n")
    entry = _new_file(call, vp, content.replace(old, new))
    commit_entries(call, [entry], f"memory str_replace {vp.norm}")
    new_lines = entry.body.split("\n")
    first = max(0, changed_line - 2)
    last = min(len(new_lines), changed_line + 3)
    return (
        "The memory file has been edited. Here is the snippet showing the change (with line "
        "numbers):\n" + _numbered(new_lines[first:last], first + 1)
    )


def cmd_insert(call: Call, inp: Mapping[str, Any], dk: Kind) -> str:
    _require(inp, "insert", "path", "insert_line", "insert_text")
    vp = parse_path(inp["path"], dk)
    item = _existing_file(call, vp)
    line = inp["insert_line"]
    lines = _lines_keeping_cr(item.body)
    if not isinstance(line, int) or isinstance(line, bool) or line < 0 or line > len(lines):
        raise BindingError(
            f"Invalid `insert_line` parameter: {line}. It should be within the range "
            f"[0, {len(lines)}].",
            "invalid_line",
        )
    lines.insert(line, str(inp["insert_text"]).rstrip("\n"))
    text = "\n".join(lines)
    if not text.endswith("\n"):
        text += "\n"
    entry = _new_file(call, vp, text)
    commit_entries(call, [entry], f"memory insert {vp.norm}")
    return f"The file {vp.text} has been edited."


def _tombstone(call: Call, slot: tuple[Kind, str], kept: str | None) -> Entry:
    """A tombstone for this key that keeps the folder ``kept`` (``kept_folder``)."""
    return new_entry(call, *slot, "", tombstone=True, memory_path=kept)


def _tombstones(call: Call, slots: Iterable[tuple[Kind, str]], gone: VPath) -> list[Entry]:
    """Tombstones for these keys, each keeping the folder that held ``gone`` (a file or a
    folder), as the SDK keeps it. A new tombstone for the key that kept an empty folder
    below ``gone`` lets that folder go too."""
    kept = parent_folder(gone.norm)
    return [_tombstone(call, slot, kept) for slot in slots]


def _slot(item: Visible) -> tuple[Kind, str]:
    return item.entry.kind, item.entry.key


def cmd_delete(call: Call, inp: Mapping[str, Any], dk: Kind) -> str:
    _require(inp, "delete", "path")
    vp = parse_path(inp["path"], dk)
    if vp.is_root:
        raise BindingError("Cannot delete the /memories directory itself", "invalid_path")
    item = file_view(call, vp).file(vp) if vp.key is not None else None
    if item is not None:
        slots = [_slot(item)]
    else:
        view = folder(call, vp)
        slots = [*map(_slot, view.under(vp)), *view.kept_under(vp)]
    if not slots:
        raise BindingError(f"The path {vp.text} does not exist", "not_found")
    commit_entries(call, _tombstones(call, slots, vp), f"memory delete {vp.norm}")
    return f"Successfully deleted {vp.text}"


def cmd_rename(call: Call, inp: Mapping[str, Any], dk: Kind) -> str:
    _require(inp, "rename", "old_path", "new_path")
    old = parse_path(inp["old_path"], dk)
    new = parse_path(inp["new_path"], dk)
    if old.is_root:
        raise BindingError("Cannot rename the /memories directory itself", "invalid_path")
    exists = folder(call, new).holds(new)
    if exists or (new.key is not None and file_view(call, new).file(new) is not None):
        raise BindingError(f"The destination {new.text} already exists", "already_exists")
    if new.norm.startswith(old.norm + "/"):
        raise BindingError(
            f"Cannot move {old.text} into itself ({new.text}); choose a path outside it",
            "invalid_path",
        )
    item = file_view(call, old).file(old) if old.key is not None else None
    moves: list[tuple[Visible, VPath]] = []
    emptied: dict[tuple[Kind, str], str] = {}  # kept folders below old: they move with it
    if item is not None:
        moves.append((item, new))
    else:
        view = folder(call, old)
        for visible in view.under(old):
            moves.append((visible, parse_path(new.norm + visible.path[len(old.norm) :], dk)))
        emptied = view.kept_under(old)
    if not moves and not emptied:
        raise BindingError(f"The path {old.text} does not exist", "not_found")
    written = _carried(call, emptied, old, new, dk)
    gone: list[tuple[Kind, str]] = list(emptied)
    for visible, dest in moves:
        if dest.key is None:
            raise BindingError(
                f"The path {dest.text} names a kind of memory, which is a folder; rename to a "
                f"file below it, such as {dest.norm}/{visible.path.rsplit('/', 1)[-1]}",
                "not_a_file",
            )
        held = file_view(call, dest).slot(dest)
        same_slot = (dest.kind, dest.key) == (visible.entry.kind, visible.entry.key)
        if held is not None and not same_slot:
            raise _taken(held, dest.text)
        written.append(_new_file(call, dest, visible.body))
        if not same_slot:  # the moved copy replaces its original in one slot: no tombstone
            gone.append(_slot(visible))
    written += _tombstones(call, gone, old)
    commit_entries(call, written, f"memory rename {old.norm} -> {new.norm}")
    return f"Successfully renamed {old.text} to {new.text}"


def _carried(
    call: Call, emptied: Mapping[tuple[Kind, str], str], old: VPath, new: VPath, dk: Kind
) -> list[Entry]:
    """Tombstones that keep the moved copies of the empty folders below ``old``: one for
    each, named after a file that emptied it, so each folder is kept where a file could
    have been (``kept_folder``)."""
    out: dict[str, Entry] = {}
    for (_, key), kept in emptied.items():
        moved = new.norm + kept[len(old.norm) :]
        if moved in out:
            continue
        dest = parse_path(f"{moved}/{key.rsplit('/', 1)[-1]}", dk)
        held = file_view(call, dest).slot(dest)
        if held is not None:
            raise _taken(held, dest.text)
        out[moved] = _tombstone(call, (dest.kind, dest.key), moved)  # type: ignore[arg-type]
    return list(out.values())


COMMANDS = {
    "view": cmd_view,
    "create": cmd_create,
    "str_replace": cmd_str_replace,
    "insert": cmd_insert,
    "delete": cmd_delete,
    "rename": cmd_rename,
}


def memory(call: Call, inp: Mapping[str, Any]) -> dict[str, Any]:
    command = inp.get("command")
    handler = COMMANDS.get(command) if isinstance(command, str) else None
    if handler is None:
        raise BindingError(f"Unknown command: {command}; use one of: {', '.join(COMMANDS)}")
    return {"content": handler(call, inp, default_kind(call))}


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "enum": list(COMMANDS)},
        "path": {"type": "string", "description": "A path below /memories."},
        "view_range": {
            "type": "array",
            "items": {"type": "integer"},
            "minItems": 2,
            "maxItems": 2,
            "description": "view: [start, end] lines; end -1 reads to the end.",
        },
        "file_text": {"type": "string", "description": "create: the file's text."},
        "old_str": {"type": "string", "description": "str_replace: text that occurs once."},
        "new_str": {"type": "string", "description": "str_replace: its replacement."},
        "insert_line": {"type": "integer", "description": "insert: after this line (0: top)."},
        "insert_text": {"type": "string", "description": "insert: the text to insert."},
        "old_path": {"type": "string", "description": "rename: from."},
        "new_path": {"type": "string", "description": "rename: to."},
    },
    "required": ["command"],
}

TEXT_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"content": {"type": "string"}},
    "required": ["content"],
}

register(
    Tool(
        name="memory",
        description=(
            "A memory directory at /memories that persists between sessions. Folders name "
            "kinds of memory: /memories/lessons/, /memories/decisions/, /memories/facts/, "
            "/memories/playbooks/ (any other path is kept as a fact). Commands: view, "
            "create, str_replace, insert, delete, rename. Everything you write lands "
            "unverified: you see your own writes (marked [unverified]), others see them once "
            "a review panel verifies them. Delete and rename are recorded, not destructive."
        ),
        input_schema=SCHEMA,
        handler=memory,
        annotations=Annotations(title="Memory (/memories)", read_only=False, destructive=False),
        gate="memory_write",
        text_result=True,
        anthropic_definition={"type": "memory_20250818", "name": "memory"},
        # Over MCP the text also comes as structuredContent {"content": text}.
        output_schema=TEXT_OUTPUT,
    )
)


__all__ = [
    "DEFAULT_KIND",
    "KIND_SEGMENTS",
    "MAX_PATH",
    "ROOT",
    "VPath",
    "entry_path",
    "memory",
    "parse_path",
    "shown_path",
]
