"""A notebook rendered as nbgrader's formgrader renders it, and what in that page could run,
load or hide anything: the instructor's side of a hostile student's markdown."""

import copy
import functools
import re

import nbformat
from bs4 import BeautifulSoup, Comment
from nbconvert.exporters import HTMLExporter
from traitlets.config import Config, PyFileConfigLoader

from grader.course import ROOT

L02 = "02_scaled_dot_product"
BEACON = "http://127.0.0.1:9/beacon"
# the formgrade template's own form elements and styles inside the notebook's container
TEMPLATE_FORM = {("textarea", "comment"), ("input", "score"), ("input", "extra-credit"),
                 ("button", "mark-graded"), ("button", "full-credit"), ("button", "no-credit")}
TEMPLATE_STYLES = {"width: 4em;", "width: 3em;", "margin-left: 1em;"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "data", "srcdoc", "background",
                  "poster", "xlink:href", "srcset", "content", "ping", "cite", "manifest"}
ALLOWED_URL = re.compile(r"(https?:|mailto:|#|data:image/(png|jpeg|gif);base64,)", re.I)
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"


@functools.cache
def formgrade_exporter(course_config: bool) -> HTMLExporter:
    """nbconvert's HTMLExporter as nbgrader's FormgradeExtension builds it: the formgrade
    template, and (``course_config``) the configuration `make formgrader` loads."""
    from nbgrader.server_extensions.formgrader import handlers

    config = Config()
    if course_config:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT / "grader")).load_config()
    config.HTMLExporter.template_name = "formgrade"
    config.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    return HTMLExporter(config=config)


def formgrade_page(notebook, course_config: bool = False, lesson: str = L02,
                   student: str = "mallory") -> str:
    """The page the formgrader's SubmissionHandler serves for ``notebook``."""
    resources = {"assignment_id": lesson, "notebook_id": lesson, "submission_id": "abc",
                 "index": 0, "total": 1, "base_url": "", "student": student, "last_name": None,
                 "first_name": None,
                 "notebook_path": f"autograded/{student}/{lesson}/{lesson}.ipynb"}
    notebook = nbformat.from_dict(copy.deepcopy(notebook))
    html, _ = formgrade_exporter(course_config).from_notebook_node(notebook, resources=resources)
    return html


@functools.lru_cache(maxsize=8)
def parsed(page: str) -> BeautifulSoup:
    """``page`` parsed once (callers only read it)."""
    return BeautifulSoup(page, "html.parser")


def active_content(page: str, beacon: str = BEACON) -> list[str]:
    """What in the notebook's part of a formgrader page could run, load or hide anything,
    read with a parser of its own (the standard library's, through BeautifulSoup)."""
    container = parsed(page).select_one("#notebook-container")
    found = [f"comment {c[:40]!r}" for c in container.find_all(string=True)
             if isinstance(c, Comment)]
    for element in container.find_all(True):
        found += element_problems(element, beacon)
    return found


def element_problems(element, beacon: str) -> list[str]:
    where = f"<{element.name} {' '.join(element.attrs)}>"
    classes = set(element.get("class", []))
    if element.name in ("textarea", "input", "button", "select", "option", "label", "form"):
        ours = any((element.name, c) in TEMPLATE_FORM for c in classes)
        checkbox = "task-list-item-checkbox" in classes and element.get("type") == "checkbox"
        if not (ours or checkbox) or "autofocus" in element.attrs:
            return [f"form element {where}"]
    if element.name in ("script", "iframe", "frame", "object", "embed", "applet", "meta",
                        "link", "base", "style", "svg", "math", "plaintext", "xmp", "noscript",
                        "template", "noembed", "noframes", "portal", "audio", "video", "source"):
        return [f"element {where}"]
    found = []
    for name, value in element.attrs.items():
        value = " ".join(value) if isinstance(value, list) else value
        cleaned = re.sub(r"[\x00-\x20]", "", value)
        if name == "style" and (value in TEMPLATE_STYLES
                                or re.fullmatch(r"text-align:(left|center|right)", value)):
            continue  # the template's, or a markdown table's column alignment
        if name.startswith("on") or name in ("style", "autofocus", "srcdoc"):
            found.append(f"attribute {name} of {where}")
        elif name in URL_ATTRIBUTES and not ALLOWED_URL.match(cleaned):
            found.append(f"URL {value[:60]!r} in {where}")
        elif element.name == "img" and name == "src" and cleaned.lower().startswith("http"):
            if value != COLAB_BADGE:
                found.append(f"image loaded from {value[:60]!r}")
        if "__pwned" in value or (beacon in value and name != "href"):  # a link is no load
            found.append(f"payload in {name} of {where}")
    return found


def shows_every_cell(page: str, notebook) -> bool:
    """Whether every cell is in the page, and the template's own elements after them (nothing
    of a cell's swallowed what follows it)."""
    soup = parsed(page)
    cells = soup.select("#notebook-container div.cell")
    return len(cells) == len(notebook.cells) and soup.select_one("#statusmessage") is not None


def page_scripts(page: str) -> list[str]:
    return [str(script) for script in parsed(page).find_all("script")]
