"""The layered context a run starts from (L0-L4), and what changed since.

    assemble.py   tools, system (L0, L1, the memory note), messages (L3 goals, L4 tail)
    cursor.py     the opaque cursor a prefix and a delta hand back
    delta.py      what changed in verified L2 since a cursor, from git history

The layers themselves are read by ``identity.layers``; where a run starts, by ``runs.start``.
"""

from __future__ import annotations
