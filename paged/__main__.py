"""``python -m paged ...``: see :mod:`paged.cli`."""

from paged.cli import main

main()
