"""The recall benchmark's side-by-side table (ours, tantivy, SQLite FTS5, rank-bm25) and targets.

One ``SideBySide`` per corpus size: rows are figures, columns are engines, every cell measured
in the same run. ``render`` prints the table in Markdown, then each recall target as the
ratio of our engine to tantivy fed our tokens (the like-for-like peer), marked met / not met.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .common import Figure

__all__ = ["COLUMNS", "RELEVANCE_FLOOR", "SideBySide", "TARGETS"]

COLUMNS = {
    "truss-files": "truss-files",
    "tantivy-en_stem": "tantivy (en_stem)",
    "tantivy-ours": "tantivy (our tokens)",
    "fts5": "SQLite FTS5",
    "rank-bm25": "rank-bm25",
}
REFERENCE = "tantivy-ours"
RELEVANCE_FLOOR = 0.850  # recall@5 of the engine before the peers were measured

# (what, our measure, the reference's measure, most ours may be as a multiple of it): issue
# #21's targets. Queries against tantivy fed the verified notes a default query searches;
# rebuild and disk against tantivy fed every note, as our index is.
TARGETS = (
    ("warm query p50 (Searcher, the CLI's warm path)", "warm_p50", "warm_p50", 2.0),
    ("warm query p95 (Searcher, the CLI's warm path)", "warm_p95", "warm_p95", 5.0),
    ("warm MemoryStore.query p50", "store_p50", "warm_p50", 2.0),
    ("warm MemoryStore.query p95", "store_p95", "warm_p95", 5.0),
    ("cold CLI query (all queries)", "cold_all", "cold_all", 1.5),
    ("cold CLI query (common-word queries)", "cold_common", "cold_common", 1.5),
    ("full rebuild (vs tantivy over every note)", "build", "build_all", 2.0),
    ("index on disk (vs tantivy over every note)", "disk", "disk_all", 3.0),
    ("update after one write (vs tantivy's commit)", "update", "update", 1.5),
)


@dataclass
class SideBySide:
    tag: str
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    values: dict[tuple[str, str], float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # measure -> (ours, reference) timed alternately in one loop; preferred for the targets
    paired: dict[str, tuple[float, float]] = field(default_factory=dict)

    def put(self, row: str, column: str, text: str, **measures: float) -> None:
        self.rows.setdefault(row, {})[column] = text
        for measure, value in measures.items():
            self.values[(measure, column)] = value

    def targets(self) -> list[Figure]:
        """Each target as a figure: ours beside the reference, the target scaled from it."""
        figures = []
        for what, measure, ref_measure, limit in TARGETS:
            ours = self.values.get((measure, "truss-files"))
            ref = self.values.get((ref_measure, REFERENCE))
            how = ""
            if measure in self.paired:
                ours, ref = self.paired[measure]
                how = ", alternated run by run"
            if ours is None or ref is None:
                continue
            figures.append(
                Figure(
                    f"{self.tag}: target {what} <= {limit:g}x tantivy",
                    ours,
                    _UNITS[measure],
                    f"tantivy (our tokens) {what}{how}",
                    ref,
                    target=limit * ref,
                )
            )
        return figures

    def render(self) -> str:
        lines = [
            f"side by side at {self.tag} notes (peers built from the verified notes; "
            "ratios from this one run):",
            "",
            "| figure | " + " | ".join(COLUMNS.values()) + " |",
            "|---" * (len(COLUMNS) + 1) + "|",
        ]
        for row, cells in self.rows.items():
            lines.append(f"| {row} | " + " | ".join(cells.get(c, "—") for c in COLUMNS) + " |")
        lines += ["", "| target (truss-files / tantivy fed our tokens) | ratio | limit | |"]
        lines.append("|---|---|---|---|")
        for figure in self.targets():
            what = figure.name.split(": target ", 1)[1]
            ratio, limit = f"{figure.ratio:.2f}x", what.rsplit("<= ", 1)[1]
            how = " (alternated run by run)" if figure.baseline_name.endswith("by run") else ""
            lines.append(
                f"| {what.split(' <=')[0]}{how} | {ratio} | {limit} | "
                f"{'met' if figure.met else 'NOT met'} |"
            )
        recall = self.values.get(("recall5", "truss-files"))
        if recall is not None:
            met = "met" if recall >= RELEVANCE_FLOOR else "NOT met"
            lines.append(f"| recall@5 on tests/relevance | {recall:.3f} | >= 0.850 | {met} |")
        lines += ["", *(f"* {note}" for note in self.notes)]
        return "\n".join(lines)


_UNITS = {
    "warm_p50": "ms",
    "warm_p95": "ms",
    "cold_all": "ms",
    "cold_common": "ms",
    "build": "s",
    "disk": "MB",
    "store_p50": "ms",
    "store_p95": "ms",
    "update": "ms",
}
