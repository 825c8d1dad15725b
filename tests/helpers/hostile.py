"""A hostile student's notebook for the instructor's pages: every way a cell, an attachment or
a piece of metadata could put active content into the formgrader's page (a script, an event
handler, a javascript: URL, an element that loads something or swallows the page).

Each payload, if it ran, would push its name onto ``top.__pwned`` (``ran``), and each that would
load something loads ``beacon``/<its name> (a listener of the browser test's; any address will
do elsewhere). The unit tests render the notebook as the formgrader does and look for any of it;
the browser test opens it in the formgrader and watches for a name in ``__pwned`` or a request
to the listener.
"""

import base64
import copy

import nbformat

from helpers.notebooks import NOTEBOOKS, read


def ran(name: str) -> str:
    """JavaScript that records that the payload ``name`` ran (single quotes only, so that it
    fits in a double-quoted HTML attribute)."""
    return f"(top.__pwned=top.__pwned||[]).push('{name}')"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def markdown_payloads(beacon: str) -> dict[str, str]:
    """name -> the source of a markdown cell that is active if rendered as written."""
    return {
        "script": f"<script>{ran('script')}</script>",
        "img-onerror": f'An image <img src="x" onerror="{ran("img-onerror")}"> inline.',
        "svg-onload": f'<svg onload="{ran("svg-onload")}"></svg>',
        "svg-script": f"<svg><script>{ran('svg-script')}</script></svg>",
        "details-ontoggle": (f'<details open ontoggle="{ran("details-ontoggle")}">'
                             "<summary>s</summary>x</details>"),
        "input-onfocus": f'<input autofocus onfocus="{ran("input-onfocus")}">',
        "iframe": f'<iframe src="{beacon}/iframe"></iframe>',
        "iframe-srcdoc": ('<iframe srcdoc="&lt;script&gt;'
                          f"{ran('iframe-srcdoc')}&lt;/script&gt;\"></iframe>"),
        "object": f'<object data="{beacon}/object"></object>',
        "embed": f'<embed src="{beacon}/embed">',
        "form": (f'<form action="{beacon}/form"><button formaction="javascript:'
                 f'{ran("form")}">Send</button></form>'),
        "meta-refresh": f'<meta http-equiv="refresh" content="0;url={beacon}/meta-refresh">',
        "style-import": f'<style>@import url("{beacon}/style-import");</style>',
        "style-attribute": f"<p style=\"background:url('{beacon}/style-attribute')\">x</p>",
        "link": f'<link rel="stylesheet" href="{beacon}/link">',
        "base": f'<base href="{beacon}/base/"><img src="relative.png">',
        "javascript-link": f'<a href="javascript:{ran("javascript-link")}">a link</a>',
        "javascript-link-entities": ('<a href="jav&#x09;ascr&#105;pt:'
                                     f'{ran("javascript-link-entities")}">a link</a>'),
        "markdown-javascript-link": f"[a link](javascript:{ran('markdown-javascript-link')})",
        "markdown-javascript-entity": ("[a link](java&#115;cript:"
                                       f"{ran('markdown-javascript-entity')})"),
        "markdown-javascript-reference": (f"[a link][r]\n\n[r]: JavaScript:"
                                          f"{ran('markdown-javascript-reference')}"),
        "markdown-javascript-autolink": f"<javascript:{ran('markdown-javascript-autolink')}>",
        "markdown-javascript-image": (f"![an image](javascript:"
                                      f"{ran('markdown-javascript-image')})"),
        "markdown-image-beacon": f"![an image]({beacon}/markdown-image)",
        "data-link": (f'<a href="data:text/html;base64,{b64("<script>alert(1)</script>")}">'
                      "a link</a>"),
        "markdown-data-link": f"[a link](data:text/html;base64,{b64('<script>x</script>')})",
        "mermaid": f'```mermaid\n</pre><img src="x" onerror="{ran("mermaid")}">\n```',
        "math-href": f"$\\href{{javascript:{ran('math-href')}}}{{x}}$ and text",
        "textarea": "<textarea>swallows what follows</textarea>",
        # last: these swallow the rest of the page when rendered as written
        "unclosed-attribute": '<a title="swallows the page after it',
        "unclosed-comment": "<!-- swallows the page after it",
        "plaintext": "<plaintext>swallows the page after it",
    }


def payload_cells(beacon: str) -> list:
    """The hostile cells, with the ids that say which payload each carries."""
    markdown = [nbformat.v4.new_markdown_cell(source, id=f"md-{name}")
                for name, source in markdown_payloads(beacon).items()]
    swallowing = markdown[-4:]
    return [*markdown[:-4], *raw_cells(), *attachment_cells(), *metadata_cells(),
            *output_cells(), *swallowing]


def raw_cells() -> list:
    html = f'<script>{ran("raw-html")}</script><img src="x" onerror="{ran("raw-img")}">'
    cells = [nbformat.v4.new_raw_cell(html, id="raw-html"),
             nbformat.v4.new_raw_cell(html, id="raw-plain")]
    cells[0].metadata["raw_mimetype"] = "text/html"
    return cells


def attachment_cells() -> list:
    html = f"<script>{ran('attachment-html')}</script>"
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" onload="{ran("attachment-svg")}">'
           f"<script>{ran('attachment-svg-script')}</script></svg>")
    cells = [nbformat.v4.new_markdown_cell("![html](attachment:evil.html)", id="att-html"),
             nbformat.v4.new_markdown_cell("![svg](attachment:evil.svg)", id="att-svg")]
    cells[0].attachments = {"evil.html": {"text/html": b64(html)}}
    cells[1].attachments = {"evil.svg": {"image/svg+xml": b64(svg)}}
    return cells


def metadata_cells() -> list:
    """Cells whose metadata lands in the page: nbgrader's grade ids (unescaped in the
    formgrade template) and tags."""
    grade_id = f'x" autofocus onfocus="{ran("grade-id")}" data-x="'
    answer = nbformat.v4.new_markdown_cell("My answer.", id="meta-grade-id")
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "task": False,
                                   "locked": False, "grade_id": grade_id,
                                   "schema_version": 3}
    graded = nbformat.v4.new_code_cell("x = 1", id="meta-grade-label")
    graded.metadata["nbgrader"] = {"solution": False, "grade": True, "task": False,
                                   "locked": False, "points": 1, "schema_version": 3,
                                   "grade_id": f'<img src="x" onerror="{ran("grade-label")}">'}
    tagged = nbformat.v4.new_code_cell("z = 3", id="meta-tags")
    tagged.metadata["tags"] = [f'"><img src="x" onerror="{ran("tags")}">']
    hidden = nbformat.v4.new_markdown_cell("Hidden from the grader.", id="meta-transient")
    hidden.metadata["transient"] = {"remove_source": True}
    return [answer, graded, tagged, hidden]


def invalid_cells() -> list:
    """Cells nbformat does not allow in a notebook: an id (nbconvert refuses to render the
    notebook, so the formgrader would answer an error instead of the submission's page), an
    image of an attachment that is not there (the same), a key it does not know."""
    named = nbformat.v4.new_code_cell("w = 4")
    named["id"] = f'"><img src="x" onerror="{ran("cell-id")}">'
    missing = nbformat.v4.new_markdown_cell("![missing](attachment:none.png)", id="att-missing")
    extra = nbformat.v4.new_code_cell("v = 5", id="extra-key")
    extra["collapsed"] = True
    return [named, missing, extra]


def output_cells() -> list:
    """A code cell with outputs as the student saved them (the grader drops them)."""
    cell = nbformat.v4.new_code_cell("print('hi')", id="outputs", execution_count=3)
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": f'<img src="x" onerror="{ran("output-html")}">',
            "application/javascript": ran("output-javascript"),
            "text/plain": "an output"}),
        nbformat.v4.new_output("execute_result", execution_count=3, data={
            "text/markdown": f"<script>{ran('output-markdown')}</script>",
            "image/svg+xml": f'<svg onload="{ran("output-svg")}"></svg>'}),
        nbformat.v4.new_output("stream", name="stdout", text="<script>alert(1)</script>"),
    ]
    return [cell]


def hostile_metadata(notebook) -> None:
    """Notebook metadata that lands in the page in some templates."""
    script = f"<script>{ran('notebook-metadata')}</script>"
    notebook.metadata["title"] = f"</title>{script}"
    notebook.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                       "display_name": script}
    notebook.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "state": {}, "version_major": 2, "version_minor": 0, "x": f"</script>{script}"}}


def ordinary_markdown() -> str:
    """A student's own markdown: what the grader must still see formatted."""
    return ("## My notes\n\nThe *scaled* scores, **then** the softmax:\n\n"
            "- each row sums to 1\n- `softmax(x - x.max())` is stable, and `<pad>` is masked\n\n"
            "$$\\mathrm{softmax}(x)_i = \\frac{e^{x_i}}{\\sum_j e^{x_j}}$$ with $a < b$\n\n"
            "> a quote & more\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n\n"
            "```python\nscores = q @ k.T / d ** 0.5\n```\n\n"
            "See [the paper](https://arxiv.org/abs/1706.03762).")


def hostile_notebook(lesson: str, beacon: str) -> nbformat.NotebookNode:
    """The released notebook of ``lesson``, with the student's own markdown after its first
    cell, every payload at its end, and hostile notebook metadata."""
    notebook = copy.deepcopy(read(NOTEBOOKS, lesson))
    own = nbformat.v4.new_markdown_cell(ordinary_markdown(), id="own-markdown")
    notebook.cells[1:1] = [own]
    notebook.cells += payload_cells(beacon)
    hostile_metadata(notebook)
    return notebook
