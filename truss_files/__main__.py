"""``python -m truss_files``: the CLI, for hooks and drivers that name their interpreter."""

from __future__ import annotations

from .faces.cli.main import main

if __name__ == "__main__":
    main()
