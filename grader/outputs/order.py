"""The order the outputs list students in: natural, so that s2 comes before s10."""

import re

DIGITS = re.compile(r"(\d+)")


def natural(text: str) -> tuple:
    """A sort key that orders the numbers inside ``text`` by value: s2 < s10 < s100."""
    parts = DIGITS.split(text)
    return (tuple((0, int(part), "") if part.isdigit() else (1, 0, part.casefold())
                  for part in parts if part), text)


def naturally(items, key=lambda item: item) -> list:
    """``items`` sorted by ``natural`` of ``key(item)``."""
    return sorted(items, key=lambda item: natural(key(item)))
