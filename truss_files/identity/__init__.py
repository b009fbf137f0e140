"""Identity (L0) and principals (L1): the files a run's context starts from, and their changes.

    changes.py    show / propose / approve / decline / set / log under [identity] policy
    amend.py      proposing an amendment to self.md (and, when eager, its judgement at once)
    judge.py      self_amend: the panel judges a proposal against core
    principals.py principals/<principal>.md: set and show
    layers.py     L0 core and self, L1 principal: read at one commit (a missing file is empty)

The files' formats (paths, the self.md template, proposals) are ``proposal``'s. Every change
is a signed commit.
"""

from __future__ import annotations
