"""A run's context: the prefix an agent harness starts a run from (L0-L4), and its deltas.

    runstart.py   a run starts at its first ``context``: the commit whose identity it read
    layers.py     L0 core and self, L1 principal: read at that commit (a missing file is empty)
    assemble.py   tools, system (L0, L1, the memory note), messages (L3 goals, L4 tail)
    cursor.py     the opaque cursor a prefix and a delta hand back
    delta.py      what changed in verified L2 since a cursor, from git history

Nothing here writes to the branch: a run's start is recorded under ``.git/truss/``.
"""

from __future__ import annotations
