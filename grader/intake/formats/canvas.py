"""Canvas (Submissions > "Download Submissions").

Every file lies at the top of the zip as ``<name>_<user id>_<attachment id>_<the student's file
name>``, with ``LATE_`` before the user id when Canvas counted the submission late (``late_`` in
older Canvas: both are read), and ``anon_<id>`` instead of name and user id when the assignment
is anonymous. ``<name>`` is the student's sortable name ("Smith, Bob"), lowercased and stripped
of everything but letters, digits and ``_``: ``smithbob``, with non-ASCII letters kept
(``müllerjörg``) and underscores kept (``o_brienpat``). Canvas folds ``_<digits>_`` out of
names, so the first ``_<digits>_<digits>_`` is the ids: the numbers anchor the parse, never the
name. The user id is the same in every assignment.

A submission that is no file has no attachment id: a website URL is written as
``<name>_<user id>_link.html`` (a page that redirects to it) and online text as
``<name>_<user id>_text.html``. Such a student handed in no notebook, and the table says so.

A group assignment's download holds the group's files once, named after the member who
submitted; every member gets the notebook when the roster has a group column (Canvas's own
export of a group set, People > Groups > Export, has ``group_name`` and ``canvas_user_id``).

Source: Canvas's ``lib/content_zipper.rb`` (``get_filename``, ``sanitize_user_name``,
``add_submission``, ``add_upload_submission``).
"""

import re

from ..download import Entry
from ..errors import Skip
from .base import Format, Found

WHO = r"(?:(?P<name>.*?)_)??(?:(?P<late>[Ll][Aa][Tt][Ee])_)?(?P<user>\d+|anon_[A-Za-z0-9]+)"
NAMED = re.compile(WHO + r"_(?P<attachment>\d+)_(?P<file>.+)", re.DOTALL)
NO_FILE = re.compile(WHO + r"_(?P<kind>link|text)\.html", re.DOTALL)
INSTEAD = {"link": "a link (Canvas website URL submission)",
           "text": "online text (Canvas text entry)"}


class Canvas(Format):
    name, label = "canvas", "Canvas"

    @classmethod
    def named_like(cls, entry: Entry) -> bool:
        return NAMED.fullmatch(entry.name) is not None or NO_FILE.fullmatch(entry.name) is not None

    def parse(self, entry: Entry) -> Found:
        if match := NO_FILE.fullmatch(entry.name):
            found = self._found(match, entry.name)
            found.instead = INSTEAD[match["kind"]]
            return found
        if match := NAMED.fullmatch(entry.name):
            return self._found(match, match["file"])
        raise Skip("not named as Canvas names files (<name>_<user id>_<attachment id>_<file>)")

    def _found(self, match: re.Match, original: str) -> Found:
        user, name = match["user"], match["name"] or None
        anonymous = user.startswith("anon_")
        identity = self.identity(f"canvas:{user}", "Canvas user", lms_id=user, name=name,
                                 stable=not anonymous)
        late = bool(match["late"])
        notes = [f"{match['late']} (Canvas)"] if late else []
        if anonymous:
            notes.append("anonymous grading: Canvas's anonymous id differs per assignment")
        return Found([identity], original, late=late, notes=notes)
