"""Gradescope (assignment > "Export Submissions").

A folder per submission, ``submission_<id>/`` with the submitted files inside, and
``submission_metadata.yml`` beside them mapping each folder to ``:submitters:`` (each with
``:name:``, ``:sid:``, ``:email:``) and ``:created_at:``, the submission time. A group submission
lists several submitters: each gets the notebook. Students are known by SID, else e-mail, else
name. Gradescope does not publish this layout; it is what its exports hold (written from Ruby,
hence the ``:key`` names), the same layout otter-grader's Gradescope reader relies on.
"""

import functools
from datetime import datetime

from ...timestamps import as_utc, parse_time
from ..download import Entry
from ..errors import CollectError, Skip
from ..students import squash
from .base import Format, Found

METADATA = "submission_metadata.yml"
MAX_METADATA_BYTES = 16 << 20  # a class of a thousand takes under 1 MiB


class Gradescope(Format):
    name, label = "gradescope", "Gradescope"
    own_files = frozenset({METADATA})
    names_each_submitter = True

    @classmethod
    def sure(cls, entries: list[Entry]) -> bool:
        return any(entry.name == METADATA for entry in entries)

    @functools.cached_property
    def metadata(self) -> dict:
        """Submission folder (in the download) -> its entry of the metadata."""
        found = {}
        for entry in self.entries:
            if entry.name == METADATA:
                data = _read(entry)
                for key, value in read_metadata(data).items():
                    found[f"{entry.folder}/{key}".strip("/")] = value
        return found

    def parse(self, entry: Entry) -> Found:
        for index in range(len(entry.parts) - 1, 0, -1):
            folder = "/".join(entry.parts[:index])
            if folder in self.metadata:
                break
        else:
            raise Skip(f"not inside a submission folder listed in {METADATA}")
        submission = self.metadata[folder]
        identities = []
        for submitter in submission.get("submitters") or []:
            if not isinstance(submitter, dict):
                continue
            sid = str(submitter.get("sid") or "").strip() or None
            email = str(submitter.get("email") or "").strip() or None
            name = str(submitter.get("name") or "").strip() or None
            if sid:
                identities.append(self.identity(f"gradescope:{sid}", "Gradescope SID",
                                                lms_id=sid, name=name, email=email,
                                                course_id=True))
            elif email:
                identities.append(self.identity(f"gradescope:{email.casefold()}",
                                                "Gradescope e-mail", lms_id=email, name=name,
                                                email=email))
            elif name:
                identities.append(self.identity(f"gradescope-name:{squash(name)}",
                                                "Gradescope SID", name=name))
        if not identities:
            raise Skip(f"{METADATA} names no submitter for {folder.split('/')[-1]}")
        time = _time(submission.get("created_at"))
        notes = []
        if len(identities) > 1:
            notes.append("group submission of " + ", ".join(i.describe() for i in identities))
        return Found(identities, "/".join(entry.parts[index:]), time,
                     "Gradescope's created_at" if time else "", notes=notes)


def _read(entry: Entry) -> bytes:
    try:
        return bytes(entry.read(MAX_METADATA_BYTES, METADATA))
    except Skip as why:
        raise CollectError(f"cannot read {entry.path}: {why}") from None


def _time(value) -> datetime | None:
    if isinstance(value, datetime):
        return as_utc(value)
    return parse_time(value) if isinstance(value, str) else None


def read_metadata(data: bytes) -> dict:
    """submission_metadata.yml as {folder: {"submitters": [...], "created_at": ...}}, with
    Gradescope's Ruby-style ``:key`` names and any Ruby tags read as plain values."""
    try:
        import yaml
    except ImportError:
        raise CollectError("reading a Gradescope export needs PyYAML (pip install pyyaml)") \
            from None

    class Loader(yaml.SafeLoader):
        pass

    def plain(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", plain)
    try:
        data = yaml.load(data.decode("utf-8"), Loader=Loader)  # noqa: S506 (a safe loader)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CollectError(f"cannot read {METADATA}: {err}") from None

    def unsymbol(value):
        if isinstance(value, dict):
            return {str(k).lstrip(":"): unsymbol(v) for k, v in value.items()}
        if isinstance(value, list):
            return [unsymbol(v) for v in value]
        return value

    return unsymbol(data) if isinstance(data, dict) else {}
