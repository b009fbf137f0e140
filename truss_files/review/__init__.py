"""Git-native review: the semantic diff of a range, the textconv and merge drivers, and sync.

Each module is one concern: ``diff`` (what changed in belief between two commits), ``render``
(that change set as text or pull-request markdown), ``textconv`` (an entry file as a reviewer
reads it), ``merge`` (two concurrent versions of one entry file settled by the trust state
machine), ``join`` (two clones' adds of one entry, joined to one file), ``drivers`` (the git
config that wires the merge and textconv drivers in), ``sync`` (fetch, audit, integrate,
push by compare-and-swap), ``why`` (why the store believes one entry: its history, verdicts,
producing call and sources, each checked), ``whytext`` (that answer as text or markdown),
``queue`` (the pending entries and one person's decision on one), ``belief`` (an entry's
timeline and provenance chain) and ``page`` (those as the review page's HTML).
"""

from __future__ import annotations
