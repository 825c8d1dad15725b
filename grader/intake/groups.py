"""Group and team submissions: one notebook, every member of the group gets it.

The roster's group column (``group``, ``group_name`` or ``team``; Canvas's export of a group set
has ``group_name``) says who is in which group. Two LMS ways of naming a group's files:

- named after the team (Moodle's team submissions: ``<group name>_<group id>_...``): a file
  whose name is a group of the roster goes to each of its members, never to a student named
  after the team (``teams``);
- named after the member who submitted (Canvas's group assignments): with ``--groups`` the
  notebook of a member goes to every other member of their group too (``share``). It is
  asked for, since a roster's groups may be sections of an assignment that is not a group one.

Every member gets a row of their own saying whose file it is; a member who also handed in a
notebook of their own keeps the newer one, as any student does (``submitted``).
"""

import dataclasses

from .candidates import Candidate
from .students import Identity, Roster
from .table import Row


def roster_identity(student: str) -> Identity:
    """A member of a group as the roster names them."""
    return Identity("roster", f"roster:{student}", "roster id", lms_id=student, course_id=True)


def teams(candidates: list[Candidate], rows: list[Row], roster: Roster | None) -> None:
    """Replace each candidate named after a roster group by one candidate per member."""
    if roster is None or not roster.groups:
        return
    for candidate in list(candidates):
        team = candidate.found.team
        members = roster.members(team) if team else []
        if not members:
            continue
        candidates.remove(candidate)
        note = f"team submission of {team!r}: {', '.join(members)}"
        for index, member in enumerate(members):
            candidates.append(_copy(candidate, roster_identity(member), rows, index, note))


def share(candidates: list[Candidate], rows: list[Row], roster: Roster | None) -> None:
    """Give each group member's notebook to the other members of the group (``--groups``)."""
    if roster is None:
        return
    for candidate in list(candidates):
        group = roster.group_of.get(candidate.student or "")
        if group is None or candidate.row.outcome == "skipped":
            continue
        others = [m for m in roster.members(group) if m != candidate.student]
        note = f"group submission of {group!r}, handed in by {candidate.student}"
        if others:
            candidate.row.details.append(note)
        for index, member in enumerate(others, start=1):
            copy = _copy(candidate, roster_identity(member), rows, index, note)
            copy.student, copy.how = member, "roster-id"
            copy.row.student, copy.row.outcome = member, candidate.row.outcome
            candidates.append(copy)


def _copy(candidate: Candidate, identity: Identity, rows: list[Row], index: int,
          note: str) -> Candidate:
    """The candidate for another member, with its own row after the original's."""
    row = candidate.row
    if index:
        row = Row(row.file, lesson=row.lesson, submitted=row.submitted,
                  details=list(candidate.row.details))
        rows.insert(rows.index(candidate.row) + index, row)
    row.details.append(note)
    return dataclasses.replace(candidate, identity=identity, row=row)
