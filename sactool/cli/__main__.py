"""``python -m sactool.cli …``: the full typer command line (no probe fast path)."""

from sactool.cli.app import main

main()
