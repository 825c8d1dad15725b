"""What the instructor's and the students' pages share: the Jinja environment of templates/,
which escapes every value as HTML, and how points and long texts are written."""

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

MAX_TEXT_CHARS = 2000
TRUNCATION_MARK = "… (truncated)"


def format_points(value: float) -> str:
    """Points without needless decimals: 2.0 -> "2", 2.5 -> "2.5", 1/3 -> "0.33"."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def truncated(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """Text cut to `limit` characters with a visible mark."""
    return f"{text[:limit]}\n{TRUNCATION_MARK}" if len(text) > limit else text


TEMPLATES = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(("html", "j2")), undefined=StrictUndefined,
    trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
TEMPLATES.filters.update(points=format_points, truncated=truncated)


def render(template: str, **context) -> str:
    """A page from templates/, every value in ``context`` escaped as HTML unless marked safe."""
    return TEMPLATES.get_template(template).render(**context)
