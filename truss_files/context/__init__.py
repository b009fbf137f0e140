"""The layered context a run starts from (L0-L4), and what changed since.

    assemble.py   tools, system (L0, L1, the memory note), messages (L3 goals, L4 tail)
    cursor.py     the opaque cursor a prefix and a delta hand back
    delta.py      what changed in verified L2 since a cursor, from git history
    resume.py     a resumed run's delta since its last cursor, with bodies
    tail.py       L4: the run's own notes, bounded, a compaction's summary first
    compact.py    writing that summary (``context compact``)
    instruction.py  which memory instruction applies per provider and model
    consult.py    memory.ask's answer to the run's purpose at its start

The layers themselves are read by ``identity.layers``; where a run starts, by ``runs.start``.
"""

from __future__ import annotations
