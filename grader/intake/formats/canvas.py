"""Canvas (Submissions > "Download Submissions").

Every file lies at the top of the zip as ``<name>_<user id>_<attachment id>_<the student's file
name>``, with ``LATE_`` before the user id when Canvas counted the submission late, and
``anon_<id>`` instead of name and user id when the assignment is anonymous. ``<name>`` is the
student's sortable name ("Smith, Bob"), lowercased and stripped of everything but letters,
digits and ``_``: ``smithbob``, with non-ASCII letters kept (``müllerjörg``) and underscores kept
(``o_brienpat``). Canvas folds ``_<digits>_`` out of names, so the first
``_<digits>_<digits>_`` is the ids: the numbers anchor the parse, never the name. The user id is
the same in every assignment. Source: Canvas's ``lib/content_zipper.rb`` (``get_filename``,
``sanitize_user_name``, ``add_upload_submission``).
"""

import re

from ..download import Entry
from ..errors import Skip
from .base import Format, Found

NAMED = re.compile(r"(?:(?P<name>.*?)_)??(?:(?P<late>LATE)_)?(?P<user>\d+|anon_[A-Za-z0-9]+)"
                   r"_(?P<attachment>\d+)_(?P<file>.+)", re.DOTALL)


class Canvas(Format):
    name, label = "canvas", "Canvas"

    @classmethod
    def named_like(cls, entry: Entry) -> bool:
        return NAMED.fullmatch(entry.name) is not None

    def parse(self, entry: Entry) -> Found:
        match = NAMED.fullmatch(entry.name)
        if not match:
            raise Skip("not named as Canvas names files (<name>_<user id>_<attachment id>_<file>)")
        user, name = match["user"], match["name"] or None
        anonymous = user.startswith("anon_")
        identity = self.identity(f"canvas:{user}", "Canvas user", lms_id=user, name=name,
                                 stable=not anonymous)
        notes = ["LATE (Canvas)"] if match["late"] else []
        if anonymous:
            notes.append("anonymous grading: Canvas's anonymous id differs per assignment")
        return Found([identity], match["file"], late=bool(match["late"]), notes=notes)
