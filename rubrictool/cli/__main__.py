"""``python -m rubrictool.cli``: the same as the ``rubrictool`` command."""

from rubrictool.cli import main

main()
