"""This course's own naming, and what collect falls back to: ``<student id>_<file>`` anywhere in
the download (the demo class's zips), or per-student folders ``<student>/<file>`` (also a zipped
``submitted/`` tree). A "student id" with a space in it is a person's name."""

import re

from ..download import Entry
from ..students import squash
from .base import Format, Found

COPY_OF = re.compile(r"^(?:copy of )+", re.IGNORECASE)


class Files(Format):
    name, label = "files", "<student>_<file> names or per-student folders"

    def parse(self, entry: Entry) -> Found:
        stem = COPY_OF.sub("", entry.name)
        prefix, _, rest = entry.name.partition("_")
        numbers = {lesson.split("_", 1)[0] for lesson in self.lessons}
        if rest and prefix not in numbers \
                and not any(stem.startswith(lesson) for lesson in self.lessons):
            raw, original = prefix, rest
        else:
            raw, original = self.student_folder(entry), entry.name
        if any(c.isspace() for c in raw):  # a person's name, not an id
            return Found([self.identity(f"name:{squash(raw)}", "folder", name=raw)], original)
        return Found([self.identity(f"id:{raw}", "file id", lms_id=raw, course_id=True)],
                     original)
