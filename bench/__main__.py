"""``make bench`` (``python -m bench [ARGS]``): peak RSS and time of exporting many spans.

ARGS pass through to ``bench/export_rss.py`` (``--spans N``, ``--rotate-rows N``, ``--out DIR``).
"""

import sys

from bench.export_rss import main

sys.exit(main(sys.argv[1:]))
