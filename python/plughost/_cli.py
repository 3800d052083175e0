"""The ``plughost`` console script: the Rust CLI, run inside this interpreter
so plugins see this environment's site-packages."""

from __future__ import annotations

import sys


def main() -> None:
    from . import _native

    sys.exit(_native.cli_main(["plughost", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
