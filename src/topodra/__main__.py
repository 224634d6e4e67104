"""``python -m topodra``: the same as the ``topodra`` command."""

from topodra.cli import main

main()
