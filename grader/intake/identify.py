"""Each notebook's student: the roster's or the LMS's id, made a folder name; never two
accounts merged into one student unless the roster says by id that they are one."""

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

from .candidates import NO_NOTEBOOK, Candidate
from .errors import Skip
from .manifest import Manifest
from .students import Identity, Roster, folder_id, resolve
from .table import Row


@dataclass(frozen=True)
class Resolved:
    student: str
    how: str  # "roster-id", "roster-name", "lms-id" or "lms-name"
    note: str | None = None
    merged: bool = False


def identify(candidates: list[Candidate], others: list[tuple[Identity, Row]],
             roster: Roster | None, manifest: Manifest) -> None:
    """Give each candidate its student id, or skip it saying why; the other files of a known
    student get the student in their row."""
    identities = {c.identity.key: c.identity for c in candidates}
    identities.update({i.key: i for i, _ in others})
    lms_ids = defaultdict(set)  # one key, several LMS ids: two Moodle participants of one name
    for candidate in candidates:
        lms_ids[candidate.identity.key].add(candidate.identity.lms_id)
    resolved = {key: _resolve(identity, lms_ids.get(key, set()), roster)
                for key, identity in identities.items()}
    _keep_apart(resolved, identities, manifest)
    for candidate in candidates:
        _assign(candidate, resolved[candidate.identity.key])
    for identity, row in others:
        result = resolved.get(identity.key)
        if isinstance(result, Resolved) and row.student == "-":
            row.student = result.student


def _resolve(identity: Identity, lms_ids: set, roster: Roster | None) -> Resolved | Skip:
    if len(lms_ids) > 1:
        ids = ", ".join(sorted(filter(None, lms_ids)))
        return Skip(f"ambiguous: {len(lms_ids)} students named {identity.name!r} in this "
                    f"download ({ids}), and {identity.lms}'s ids do not carry over to other "
                    f"lessons")
    try:
        raw, how = resolve(identity, roster)
        student, note = folder_id(raw)
    except Skip as why:
        return why
    return Resolved(student, how, note)


def _keep_apart(resolved: dict[str, Resolved | Skip], identities: dict[str, Identity],
                manifest: Manifest) -> None:
    """Two identities, one student (now or in an earlier download): merged only where the
    roster's ids (its id, lms_id or email columns) say so; an account that reaches a student
    by name, or by an id that only maps to the same folder, is skipped as ambiguous."""
    claims: dict[str, dict[str, str]] = defaultdict(dict)
    for key, result in resolved.items():
        if isinstance(result, Resolved):
            claims[result.student.casefold()][key] = result.how

    def who(student: str, key: str) -> str:
        return manifest.who(student, key) or identities[key].describe()

    for student, keys in claims.items():
        earlier = manifest.identities(student)
        everyone = earlier | keys
        if len(everyone) < 2:
            continue
        explicit = {k for k, how in everyone.items() if how == "roster-id"}
        for key in keys:
            if key in explicit and len(explicit) > 1:
                merged = [who(student, k) for k in explicit if k != key]
                resolved[key] = dataclasses.replace(
                    resolved[key], merged=True,
                    note=f"merged: the roster also gives this student to {', '.join(merged)}")
            elif key not in explicit and (explicit or key not in earlier):
                rivals = [who(student, k) for k in everyone if k != key]
                resolved[key] = Skip(f"{identities[key].describe()} and {', '.join(rivals)} "
                                     f"would both be student {resolved[key].student}: not merged")


def _assign(candidate: Candidate, result: Resolved | Skip) -> None:
    row = candidate.row
    if isinstance(result, Skip):
        row.skip(str(result))
        return
    candidate.student, candidate.how = result.student, result.how
    row.student = result.student
    row.outcome = "merged" if result.merged else "collected"
    if result.how == "roster-name":
        row.details.append(f"{candidate.identity.describe()} matched on the roster by name")
    elif result.how == "lms-name":
        row.details.append(f"id from the name: {candidate.identity.lms} gives no id")
    if result.note:
        row.details.append(result.note)


def no_notebook(candidates: list[Candidate],
                others: list[tuple[Identity, Row]]) -> dict[str, Row]:
    """A student whose files are all ignored has lost nothing silently: their rows say so.
    Returns {student: a row} of those whose student is known, for the report."""
    with_notebook = {c.identity.key for c in candidates}
    with_notebook |= {c.student for c in candidates if c.student}
    without = {}
    for identity, row in others:
        if identity.key in with_notebook or row.student in with_notebook:
            continue
        if row.outcome in ("ignored", "unpacked"):
            reason = row.details[0] if row.details and row.details[0].startswith(NO_NOTEBOOK) \
                else NO_NOTEBOOK
            row.skip(f"{reason} by {identity.describe()}")
            if reason != NO_NOTEBOOK:
                del row.details[1]
        if row.student != "-":
            without.setdefault(row.student, row)
    return without
