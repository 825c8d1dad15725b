"""Per-student feedback: one small self-contained HTML page per graded submission.

Pages go to feedback/<student>/<lesson>/<lesson>.html, nbgrader's feedback layout, so that
`nbgrader release_feedback` can hand them out. A page shows the score, the outcome and, for each
exercise, its points and the checker's diagnosis; it holds nothing but what the result says.
"""

import html
from pathlib import Path

from .report import escaped, exercise_name, format_points

OUTCOME_EXPLANATIONS = {
    "ungradable": "Your notebook could not be graded.",
    "timed out": "Your notebook took too long to run, so it could not be graded.",
    "crashed": "Your notebook could not be run to the end, so it could not be graded.",
}

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 50em; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin: 0; display: flex; justify-content: space-between; }
.score { font-size: 1.3em; }
.notice { border-left: 4px solid #c60; background: #fff4e5; padding: 0.5em 1em; }
.exercise { border: 1px solid #ddd; border-left-width: 4px; border-radius: 4px;
            padding: 0.6em 1em; margin: 1em 0; }
.exercise.passed { border-left-color: #2a7; }
.exercise.failed { border-left-color: #c33; }
.passed-line { color: #176; margin: 0.4em 0 0; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f6f6; padding: 0.6em;
      margin: 0.4em 0 0; }
"""


def outcome_html(result: dict) -> str:
    outcome = result["outcome"]
    if outcome == "graded":
        return "<p>Outcome: graded.</p>"
    explanation = OUTCOME_EXPLANATIONS.get(outcome, "Your notebook could not be graded.")
    reason = result.get("reason") or ""
    details = f"<pre>{escaped(reason)}</pre>" if reason else ""
    return (f'<div class="notice"><p>Outcome: <strong>{html.escape(outcome)}</strong>. '
            f"{explanation}</p>{details}</div>")


def exercise_html(exercise: dict, result: dict) -> str:
    """One exercise: its name, points, and a positive line or the diagnosis."""
    passed = bool(exercise["passed"])
    message = exercise.get("message") or ""
    if passed:
        body = '<p class="passed-line">Passed. Well done!</p>'
    elif message and message != result.get("reason"):
        body = f"<pre>{escaped(message)}</pre>"
    elif result["outcome"] == "graded":
        body = "<p>Not passed.</p>"
    else:
        body = "<p>Not graded (see above).</p>"
    points = f"{format_points(exercise['points'])} / {format_points(exercise['max_points'])}"
    return (f'<section class="exercise {"passed" if passed else "failed"}">'
            f"<h2><span>{html.escape(exercise_name(exercise['grade_id']))}</span>"
            f"<span>{points}</span></h2>\n{body}</section>")


def feedback_html(result: dict) -> str:
    """The feedback page for one student's submission of one lesson."""
    student, lesson = html.escape(result["student"]), html.escape(result["lesson"])
    exercises = "\n".join(exercise_html(exercise, result) for exercise in result["exercises"])
    score = f"{format_points(result['score'])} / {format_points(result['max_score'])}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{lesson}: feedback for {student}</title>
<style>{STYLE}</style>
</head>
<body>
<h1>{lesson}</h1>
<p>Feedback for <strong>{student}</strong></p>
<p class="score">Score: <strong>{score}</strong></p>
{outcome_html(result)}
{exercises}
</body>
</html>
"""


def path_part(name: str) -> str:
    """`name` if it is safe as a single folder or file name, else ValueError."""
    if name in ("", ".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"not usable as a folder name: {name!r}")
    return name


def write_feedback(results: list[dict], feedback_dir: Path) -> list[Path]:
    """Write feedback_dir/<student>/<lesson>/<lesson>.html for every result; return the paths."""
    paths = []
    for result in results:
        student, lesson = path_part(result["student"]), path_part(result["lesson"])
        path = Path(feedback_dir) / student / lesson / f"{lesson}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(feedback_html(result).encode("utf-8"))
        paths.append(path)
    return paths
