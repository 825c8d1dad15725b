"""``collected.json`` in the workspace: what collect took from which download, and from whom.

It keeps each download's hash (a download collected before is not collected again), which LMS
identity each student id was collected from (a second download of a lesson never makes a second
student), each collected notebook's source, hash, time and the LMS's LATE marker, and the
students who handed in no notebook (a link, text, a receipt), whom the report shows as missing.
``Collected`` is what the rest of the grader reads of it.
"""

import json
from dataclasses import dataclass, field

from ..workspace import Workspace, atomic_write
from .errors import CollectError
from .students import Identity


class Manifest:
    """collect's record, read and written by collect alone."""

    def __init__(self, workspace: Workspace, data: dict):
        self.path = workspace.manifest
        self.archives: dict[str, dict] = data.get("archives", {})
        self.students: dict[str, dict[str, dict]] = data.get("students", {})
        self.submissions: dict[str, dict] = data.get("submissions", {})
        self.no_notebook: dict[str, dict] = data.get("no_notebook", {})

    @classmethod
    def load(cls, workspace: Workspace) -> "Manifest":
        path = workspace.manifest
        try:
            data = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, json.JSONDecodeError) as err:
            raise CollectError(f"cannot read {path} ({err}): move it away to start over, "
                               f"knowing that downloads collected before would be collected "
                               f"again") from None
        return cls(workspace, data if isinstance(data, dict) else {})

    def identities(self, student: str) -> dict[str, str]:
        """{identity key: how} of everyone collected before as this student (case folded)."""
        found = {}
        for name, keys in self.students.items():
            if name.casefold() == student:
                found.update({key: value["how"] for key, value in keys.items()})
        return found

    def who(self, student: str, key: str) -> str | None:
        for name, keys in self.students.items():
            if name.casefold() == student and key in keys:
                return keys[key]["who"]
        return None

    def submission(self, student: str, lesson: str) -> dict | None:
        return self.submissions.get(f"{student}/{lesson}")

    def adopt(self, student: str, identity: Identity, how: str) -> None:
        """Remember that ``identity`` is ``student`` (kept if known already)."""
        self.students.setdefault(student, {}).setdefault(
            identity.key, {"how": how, "who": identity.describe()})

    def record(self, student: str, lesson: str, identity: Identity, how: str,
               source: dict) -> None:
        """A notebook collected for ``student``: who it came from, and ``source`` (download,
        entry, hash, time, LATE marker, when collected)."""
        self.students.setdefault(student, {})[identity.key] = {
            "how": how, "who": identity.describe()}
        self.submissions[f"{student}/{lesson}"] = source

    def without_notebook(self, student: str, lesson: str, source: dict) -> None:
        """A student of the download who handed in no notebook (``source``: entry, why); kept
        until a notebook of theirs for the lesson is collected."""
        if f"{student}/{lesson}" not in self.submissions:
            self.no_notebook[f"{student}/{lesson}"] = source

    def save(self) -> None:
        for key in set(self.no_notebook) & set(self.submissions):
            del self.no_notebook[key]
        data = {"archives": self.archives, "students": self.students,
                "submissions": self.submissions, "no_notebook": self.no_notebook}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode())


@dataclass(frozen=True)
class Collected:
    """What the manifest says about the class, for the gradebook and the reports."""

    late: frozenset[tuple[str, str]] = frozenset()  # (student, lesson) the LMS marked late
    canvas_ids: dict[str, str] = field(default_factory=dict)  # student -> Canvas user id
    names: dict[str, str] = field(default_factory=dict)  # student -> the LMS's name, if any
    # (student, lesson) -> what they handed in instead of a notebook; lesson "" if not known
    no_notebook: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def read(cls, workspace: Workspace) -> "Collected":
        try:
            path = workspace.manifest
            data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, ValueError):
            data = {}
        late = set()
        for key, record in dict(data.get("submissions") or {}).items():
            student, _, lesson = str(key).rpartition("/")
            if isinstance(record, dict) and record.get("late") and not record.get("time"):
                late.add((student, lesson))
        canvas, names = {}, {}
        for student, identities in dict(data.get("students") or {}).items():
            for key, value in dict(identities or {}).items():
                kind, _, lms_id = str(key).partition(":")
                if kind == "canvas" and lms_id.isdigit():  # not an anonymous id
                    canvas.setdefault(student, lms_id)
                who = str(dict(value or {}).get("who", ""))
                if who.endswith(")") and " (" in who:
                    names.setdefault(student, who[who.rindex(" (") + 2:-1])
        without = {}
        for key, record in dict(data.get("no_notebook") or {}).items():
            student, _, lesson = str(key).rpartition("/")
            without[student, lesson] = str(dict(record or {}).get("why", ""))
        return cls(frozenset(late), canvas, names, without)
