"""The task registry: each task's run context, nothing else; read again when it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from truss_files.errors import ConfigError
from truss_files.faces.server.tasks import TaskRegistry
from truss_files.faces.server.watched import Watched
from truss_files.model import Layer

GOOD = b"""
[tasks.T-118]
member = "m-7"
role = "reviewer"
team = "platform"
enterprise = "acme"
project = "p-3"
version = "4"
clone = false
grants = [{layer = "team", eventPrefix = "ci:"}]
"""


def test_a_task_becomes_its_run_context() -> None:
    ctx = TaskRegistry.parse(GOOD).get("T-118")
    assert ctx is not None
    assert (ctx.task, ctx.member, ctx.role, ctx.team, ctx.enterprise) == (
        "T-118", "m-7", "reviewer", "platform", "acme",
    )  # fmt: skip
    assert (ctx.project, ctx.version, ctx.clone) == ("p-3", "4", False)
    assert [(g.layer, g.event_prefix) for g in ctx.grants] == [(Layer.TEAM, "ci:")]


@pytest.mark.parametrize("task_id", ["../T-118", "T-118/..", "", ".", "T 118", "T-118\x00"])
def test_a_malformed_task_id_names_no_task(task_id: str) -> None:
    assert TaskRegistry.parse(GOOD).get(task_id) is None


@pytest.mark.parametrize(
    "text, problem",
    [
        (GOOD.replace(b'team = "platform"\n', b""), "needs team"),
        (GOOD + b'author = "x"\n', "unknown field"),
        (GOOD.replace(b"clone = false", b'clone = "no"'), "clone"),
        (GOOD.replace(b'"team", eventPrefix = "ci:"', b'"galaxy", eventPrefix = "ci:"'), "galaxy"),
        (b'[tasks."../x"]\nmember="a"\nrole="b"\nteam="c"\nenterprise="d"\n', "task id"),
        (b"[tasks.T-1\n", "not valid TOML"),
    ],
)
def test_a_malformed_registry_is_refused_by_name(text: bytes, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        TaskRegistry.parse(text, "tasks.toml")


def test_the_registry_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "tasks.toml"
    path.write_bytes(GOOD)
    watched = Watched(path, TaskRegistry.parse)
    first = watched.get()
    assert watched.get() is first  # unchanged: not parsed again
    path.write_bytes(GOOD.replace(b"T-118", b"T-119"))
    assert set(watched.get().tasks) == {"T-119"}
    # An in-place edit of the same size within the same clock tick still shows: the time is
    # set apart by hand, as a coarse file system would not.
    path.write_bytes(GOOD.replace(b"T-118", b"T-120"))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert set(watched.get().tasks) == {"T-120"}
    path.write_bytes(b"[tasks.broken\n")
    with pytest.raises(ConfigError):
        watched.get()
    with pytest.raises(ConfigError):
        watched.get()  # still broken: still refused, never the last good registry
    path.unlink()
    with pytest.raises(ConfigError, match="cannot read"):
        watched.get()
