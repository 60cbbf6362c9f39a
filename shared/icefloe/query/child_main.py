"""Entry point of the watched query process: ``python -m icefloe.query.child_main``."""

import sys

from icefloe.query.isolation import serve

if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
