"""The LMS formats collect reads, one module each, and how a download's format is told.

A format with a sure sign in the download (nbgrader's exchange folders, Gradescope's metadata
file, Teams' ``Submitted files/``, Sakai's ``Submission attachment(s)/``) is taken first, in the
order of ``FORMATS``; otherwise every notebook (or zip) votes for
the first format whose naming it follows, and a format wins with at least half of the votes.
Anything else is read as this course's own naming (``files``). To read a new LMS: a module here
with its ``Format`` subclass (see ``base.py``), and its place in ``FORMATS``.
"""

from collections import Counter

from ..download import Entry
from .base import Format, Found
from .blackboard import Blackboard
from .brightspace import Brightspace
from .canvas import Canvas
from .classroom import Classroom
from .exchange import Exchange
from .files import Files
from .gradescope import Gradescope
from .moodle import Moodle
from .sakai import Sakai
from .teams import Teams

FORMATS: tuple[type[Format], ...] = (Exchange, Gradescope, Teams, Sakai, Moodle, Blackboard,
                                     Canvas, Brightspace, Classroom, Files)
BY_NAME = {fmt.name: fmt for fmt in FORMATS}

__all__ = ["BY_NAME", "FORMATS", "Format", "Found", "detect"]


def detect(entries: list[Entry]) -> type[Format]:
    """The format of a download, from its entries' names."""
    for fmt in FORMATS:
        if fmt.sure(entries):
            return fmt
    files = [e for e in entries if e.is_notebook() or e.is_zip()] or entries
    votes = Counter(fmt for entry in files
                    for fmt in [next((f for f in FORMATS if f.named_like(entry)), None)] if fmt)
    if votes:
        fmt, count = votes.most_common(1)[0]
        if 2 * count >= len(files):
            return fmt
    return Files
