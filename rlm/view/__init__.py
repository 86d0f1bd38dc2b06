"""``rlm view``: one self-contained HTML page that shows a run.

:func:`load_trace` reads a JSONL trace (tolerating a cut last line and
events from a newer rlm); :func:`write_page` turns it into a page with the
overview, the call tree with every step, the timeline and where the time
went.  The page needs no network and no server.
"""

from rlm.view.load import LoadedTrace, load_trace, parse_trace
from rlm.view.page import render_page, write_page

__all__ = ["LoadedTrace", "load_trace", "parse_trace", "render_page", "write_page"]
