"""What of a student's notebook the instructor's pages may show: nothing that runs or loads.

nbgrader's formgrader shows a submission, its autograded notebook, as HTML in the instructor's
Jupyter session: nbconvert's HTMLExporter with nbgrader's ``formgrade`` template, which puts a
markdown cell's HTML into the page as it is (it ignores ``HTMLExporter.sanitize_html``) and
nbgrader's grade ids unescaped. A script or an event handler there runs with the instructor's
rights. ``inert_cell`` makes a cell safe to show:

- markdown is kept as written when nbconvert renders it to inert HTML (``is_inert``); if not,
  with its HTML escaped (shown as text, formatting kept); if that is still not inert (a
  javascript: link, an image from elsewhere), its source is shown in a code block;
- attachments keep only raster images (nbconvert makes one of any type a data: URL);
- a raw cell (HTML to nbconvert) shows its source in a code block;
- outputs keep only text and raster images, and metadata only nbgrader's, when its grade id is
  one the template can write into the page; a cell keeps only the keys nbformat allows, and a
  lone surrogate in its source (which no UTF-8 file or page can carry) becomes U+FFFD.

``is_inert`` parses the HTML as a browser does (html5lib, as bleach, nbconvert's sanitizer,
vendors it) and allows only what ordinary markdown renders to: an allow-list of elements and
attributes, links to http(s), mailto and the page itself, images from raster data or the Colab
badge of the released notebooks, no comment, no parse error (nothing left open that swallows
the page after it), no id the formgrader finds its own elements by, and no link for MathJax.

``autograded`` writes the notebook so; ``InertNotebook`` does the same in the formgrader (see
grader/nbgrader_config.py) to any notebook it shows, whoever wrote it.
"""

import copy
import functools
import re

from bleach import html5lib_shim
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.strings import strip_files_prefix
from nbconvert.preprocessors import Preprocessor
from pygments.token import STANDARD_TYPES
from traitlets import Bool

HEADINGS = {f"h{level}": {"id"} for level in range(1, 7)}
ATTRIBUTES = {  # element -> the attributes it may have; an element not here may not be shown
    **dict.fromkeys(["p", "br", "hr", "em", "strong", "b", "i", "u", "s", "del", "ins", "sub",
                     "sup", "kbd", "samp", "var", "mark", "small", "blockquote", "ul", "dl",
                     "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "caption",
                     "summary"], set()),
    **HEADINGS, "th": {"style"}, "td": {"style"}, "ol": {"start"}, "details": {"open"},
    "a": {"href", "title", "class"}, "img": {"src", "alt", "title"}, "abbr": {"title"},
    "li": {"class"}, "input": {"class", "type", "disabled", "checked"},
    "span": {"class"}, "div": {"class"}, "pre": {"class"}, "code": {"class"},
}
CLASSES = ({name for name in STANDARD_TYPES.values() if name}  # pygments' highlighting
           | {"highlight", "anchor-link", "task-list-item", "task-list-item-checkbox"})
LANGUAGE_CLASS = re.compile(r"language-[\w+#.-]+")  # a code block's, by mistune
ALIGNED = re.compile(r"text-align:(left|center|right)")  # a table column's, by mistune
RASTER = ("image/png", "image/jpeg", "image/gif", "image/webp")
RASTER_DATA = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*", re.I)
LINK = re.compile(r"(https?|mailto):|#", re.I)
MATH_LINK = re.compile(r"\\(?:href|url)\s*\{([^}]*)\}")
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"  # every lesson's
PAGE_IDS = frozenset({"notebook", "notebook-container", "statusmessage"})  # formgrade's own
GRADE_ID = re.compile(r"[A-Za-z0-9_-]+")  # what the formgrade template writes into the page
REMEMBERED_CHARACTERS = 4096  # a markdown cell this short is checked once and remembered
UNSHOWABLE = "*The student's cell cannot be shown safely here: open the notebook itself.*"
CELL_KEYS = {"code": {"id", "cell_type", "metadata", "source", "outputs", "execution_count"},
             "markdown": {"id", "cell_type", "metadata", "source", "attachments"}}
OUTPUT_DATA = ("text/plain", "image/png", "image/jpeg")
TAG_START = re.compile(r"<(?=[A-Za-z/!?])")  # what opens HTML in markdown (tag, comment, link)
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
SURROGATE = re.compile("[\ud800-\udfff]")
UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef"
                         + "".join(chr(plane + 0xfffe) + chr(plane + 0xffff)
                                   for plane in range(0, 0x110000, 0x10000)) + "]")


class InertNotebook(Preprocessor):
    """Each cell as ``inert_cell`` makes it, before nbconvert's template renders it: the
    formgrader's HTMLExporter (grader/nbgrader_config.py)."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors").tag(config=True)

    def preprocess(self, nb, resources):
        reserved = formgrader_ids(nb.cells)
        nb.cells = [inert_cell(cell, reserved) for cell in nb.cells]
        return nb, resources


def formgrader_ids(cells) -> frozenset[str]:
    """The ids the formgrader's script finds its own elements by (a graded cell's score box,
    #<grade id>, an answer's comment box, #<grade id>-comment): a student's heading may take
    none of them."""
    ids = set(PAGE_IDS)
    for cell in cells:
        nbgrader = _nbgrader(cell.get("metadata"))
        grade_id = nbgrader.get("grade_id")
        if isinstance(grade_id, str) and (nbgrader.get("grade") or nbgrader.get("task")):
            ids.add(grade_id)
        if isinstance(grade_id, str) and (nbgrader.get("solution") or nbgrader.get("task")):
            ids.add(f"{grade_id}-comment")
    return frozenset(ids)


def _nbgrader(metadata) -> dict:
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return nbgrader if isinstance(nbgrader, dict) else {}


def inert_cell(cell, reserved: frozenset[str] = PAGE_IDS):
    """A copy of ``cell`` that shows nothing active in the formgrader (the module docstring),
    with only the keys nbformat allows it (nbconvert renders no notebook with others)."""
    cell = copy.deepcopy(cell)
    cell.source = SURROGATE.sub("\ufffd", cell.source)  # no UTF-8 file or page can carry one
    if cell.cell_type == "raw":
        cell.cell_type, cell.source = "markdown", shown_as_text(cell.source, "raw cell", reserved)
        cell.pop("attachments", None)
    elif cell.cell_type == "markdown":
        cell.source, attachments = inert_markdown(cell.source, cell.get("attachments"), reserved)
        cell.pop("attachments", None)
        if attachments:
            cell.attachments = attachments
    elif cell.cell_type == "code":
        cell.outputs = inert_outputs(cell.get("outputs", []))
    cell.metadata = _inert_metadata(cell.get("metadata", {}))
    for key in set(cell) - CELL_KEYS[cell.cell_type]:
        del cell[key]
    return cell


def inert_markdown(source: str, attachments, reserved: frozenset[str] = PAGE_IDS):
    """A markdown cell's source and attachments, as the formgrader may show them."""
    images = raster_attachments(attachments)
    if not images and len(source) <= REMEMBERED_CHARACTERS:
        return _inert_text(source, reserved), {}
    return _inert_markdown(source, images, reserved)


@functools.lru_cache(maxsize=1024)
def _inert_text(source: str, reserved: frozenset[str]) -> str:
    """A short markdown cell without images, as the formgrader may show it: checked once in a
    process, as a lesson's own text is the same in every student's notebook (the lessons' 308
    markdown cells are at most 2,400 characters; at most 1,024 cells are kept)."""
    return _inert_markdown(source, {}, reserved)[0]


def _inert_markdown(source: str, images: dict, reserved: frozenset[str]):
    for candidate in (source, escape_html(source)):
        if renders_inert(candidate, images, reserved):
            return candidate, images
    what = "markdown, which has HTML or links the formgrader does not show,"
    return shown_as_text(source, what, reserved), {}


def inert_outputs(outputs) -> list:
    """A code cell's outputs with only their text and raster images, which nbconvert renders
    escaped or as data: streams, errors, and what is left of each display."""
    kept = []
    for output in outputs:
        kind = output.get("output_type")
        if kind in ("display_data", "execute_result"):
            output.data = {mime: value for mime, value in output.get("data", {}).items()
                           if mime in OUTPUT_DATA}
            output.metadata = {}
        if kind in ("stream", "error") or output.get("data"):
            kept.append(output)
    return kept


def _inert_metadata(metadata) -> dict:
    """nbgrader's metadata alone, when its grade id is one the template can write as it is."""
    nbgrader = _nbgrader(metadata)
    grade_id = nbgrader.get("grade_id")
    if isinstance(grade_id, str) and GRADE_ID.fullmatch(grade_id):
        return {"nbgrader": nbgrader}
    return {}


def raster_attachments(attachments) -> dict:
    """The raster images of a cell's attachments (name -> {mime type: base64})."""
    kept = {}
    for name, bundle in (attachments if isinstance(attachments, dict) else {}).items():
        images = {mime: "".join(data) if isinstance(data, list) else data
                  for mime, data in (bundle if isinstance(bundle, dict) else {}).items()
                  if mime in RASTER and isinstance(data, str | list)}
        if images:
            kept[name] = images
    return kept


def shown_as_text(source: str, what: str, reserved: frozenset[str]) -> str:
    """Markdown that shows ``source`` as it is, in a code block (its fence longer than any run
    of tildes in it, so nothing in it ends the block), checked like any other."""
    source = UNPRINTABLE.sub("\ufffd", source)  # what HTML may not carry, as a browser shows it
    fence = "~" * max(4, 1 + max(map(len, re.findall("~+", source)), default=0))
    text = f"*The student's {what} shown as text:*\n\n{fence}\n{source}\n{fence}"
    return text if renders_inert(text, {}, reserved) else UNSHOWABLE


def escape_html(source: str) -> str:
    """``source`` with each ``<`` that could open HTML written ``&lt;`` (which markdown shows
    as ``<``), but in fenced code blocks and code spans, where markdown shows it as it is."""
    pieces, fence = [], None
    for line in source.splitlines(keepends=True):
        if fence is None and (opening := FENCE.match(line)):
            fence = opening.group(1)
        elif fence is not None and _closes(line, fence):
            fence = None
        else:
            pieces.append((fence is not None, line))
            continue
        pieces.append((True, line))
    return "".join(line if code else _escape_outside_spans(line) for code, line in
                   _joined(pieces))


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a code block opened by ``fence``."""
    mark = line.strip()
    return set(mark) == {fence[0]} and len(mark) >= len(fence)


def _joined(pieces):
    """Consecutive lines of the same kind (code or not) joined, so spans may cross lines."""
    joined = []
    for code, line in pieces:
        if joined and joined[-1][0] == code:
            joined[-1] = (code, joined[-1][1] + line)
        else:
            joined.append((code, line))
    return joined


def _escape_outside_spans(text: str) -> str:
    parts, end = [], 0
    for span in CODE_SPAN.finditer(text):
        parts += [TAG_START.sub("&lt;", text[end:span.start()]), span.group()]
        end = span.end()
    return "".join(parts) + TAG_START.sub("&lt;", text[end:])


def render(source: str, attachments: dict) -> str:
    """The HTML of a markdown cell as the formgrade template makes it (nbconvert's
    HTMLExporter's markdown2html, with its defaults, then strip_files_prefix)."""
    renderer = IPythonRenderer(escape=False, attachments=attachments)
    return strip_files_prefix(MarkdownWithMath(renderer=renderer).render(source))


def renders_inert(source: str, attachments: dict, reserved: frozenset[str]) -> bool:
    try:
        html = render(source, attachments)
    except Exception:  # e.g. an attachment that is not there: nbconvert cannot show the cell
        return False
    return is_inert(html, reserved)


def is_inert(html: str, reserved: frozenset[str] = PAGE_IDS) -> bool:
    """Whether ``html``, in the formgrader's page, can run, load or hide nothing (see the
    module docstring)."""
    parser = html5lib_shim.HTMLParser(namespaceHTMLElements=False)
    fragment = parser.parseFragment(html, container="div")
    if parser.errors:
        return False
    parents = {child: parent for parent in fragment.iter() for child in parent}
    code = {node for parent in fragment.iter() if parent.tag in ("pre", "code")
            for node in parent.iter()}
    for element in fragment.iter():
        if element is fragment:
            text_ok = _no_math_link(element.text)
        elif not isinstance(element.tag, str) or not _allowed(element, reserved):
            return False  # a comment, an element of SVG or MathML, or one not on the list
        else:
            text_ok = (element in code or _no_math_link(element.text)) and \
                      (parents[element] in code or _no_math_link(element.tail))
        if not text_ok:
            return False
    return True


def _allowed(element, reserved: frozenset[str]) -> bool:
    allowed = ATTRIBUTES.get(element.tag)
    if allowed is None or not set(element.attrib) <= allowed:
        return False
    if element.tag == "input" and (element.get("type") != "checkbox"
                                   or "disabled" not in element.attrib):
        return False  # a task list's box, and nothing else
    return all(_value_allowed(element.tag, name, value, reserved)
               for name, value in element.attrib.items())


def _value_allowed(tag: str, name: str, value: str, reserved: frozenset[str]) -> bool:
    if name == "href":
        return bool(LINK.match(_url(value)))
    if name == "src":
        return _url(value) == COLAB_BADGE or bool(RASTER_DATA.fullmatch(_url(value)))
    if name == "class":
        return all(c in CLASSES or LANGUAGE_CLASS.fullmatch(c) for c in value.split())
    if name == "style":
        return bool(ALIGNED.fullmatch(value))
    if name == "id":
        return value not in reserved
    if name == "start":
        return value.isdigit()
    return True


def _url(value: str) -> str:
    """A URL as a browser reads it: without ASCII tabs and newlines, nor the control
    characters and spaces around it."""
    return re.sub(r"[\t\n\r]", "", value).strip("".join(map(chr, range(0x21))))


def _no_math_link(text: str | None) -> bool:
    """No ``\\href`` or ``\\url`` for MathJax (in its Safe mode anyway) but to a link allowed."""
    return all(LINK.match(_url(target)) for target in MATH_LINK.findall(text or ""))
