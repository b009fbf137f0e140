"""Identity (L0), principals (L1) and the layered context a run starts from (L0-L4).

    proposal.py   identity files, the self.md template, proposals (no pygit2: the audit reads it)
    identity.py   show / propose / approve / decline / set / log under [identity] policy
    judge.py      self_amend: the panel judges a proposal against core
    principals.py principals/<principal>.md: set and show
    runstart.py   a run starts at its first ``context``: the commit whose identity it read
    layers.py     L0 core and self, L1 principal: read at that commit (a missing file is empty)
    assemble.py   tools, system (L0, L1, the memory note), messages (L3 goals, L4 tail)
    cursor.py     the opaque cursor a prefix and a delta hand back
    delta.py      what changed in verified L2 since a cursor, from git history

A run's start is recorded under ``.git/truss/``; identity changes are signed commits.
"""

from __future__ import annotations
