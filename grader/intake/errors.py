"""What collect refuses: a whole download or roster (``CollectError``), or one file or student
(``Skip``, which becomes that file's row in the table)."""


class CollectError(Exception):
    """The download or the roster as a whole cannot be read; the message says why."""


class Skip(Exception):
    """This file (or this student in it) is not collected; the message says why."""
