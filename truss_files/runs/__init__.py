"""A run's life in the store: its ledger of tool calls, its chain of trust, its links, its start.

    ledger.py     the durable run ledger: every memory tool call of a run as one signed commit
    chain.py      what makes a ledger trustworthy: one principal, one signed line, never rewound
    links.py      child runs: which run a run was started under, and the view they share
    start.py      a run starts at its first ``context``: the commit whose identity it read

Records live under ``.git/truss/`` (never in the work tree); the ledger's commits are signed.
"""

from __future__ import annotations
