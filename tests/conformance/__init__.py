"""The conformance suite of the memory seam (``truss_files.memory.Memory``).

Every test here speaks to the store through the Protocol's nine operations only -- no git,
no pygit2, no store internals -- so it holds any backing to the same contract. A new
backing registers a builder in ``conftest.IMPLEMENTATIONS`` and must pass
``pytest tests/conformance``.
"""
