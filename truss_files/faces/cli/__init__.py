"""The ``truss-files`` console script: one module per group of commands."""
