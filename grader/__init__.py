"""The instructor's grader: ``python -m grader COMMAND`` (``cli``, ``commands``).

It is laid out in wings that say who may touch student code:

- ``sandbox/``: the trust boundary, the only code that runs student code or reads what its
  process sends (the runner inside bubblewrap, its limits, the framing of its pipes, the course
  package a lesson's student sees, and the grader's handle on a runner). It needs a security
  review for every change.
- ``intake/``: collect, an LMS download (or nbgrader's exchange) into submitted/, one module
  per LMS format.
- ``grading/``: a submission planned, run in the sandbox and judged here (the checks run in
  this, the trusted, process), one result each; here or on a Dask cluster.
- ``records/``: nbgrader's gradebook, the one source of truth, written per result and read by
  everything else; the course file's due dates and late policy.
- ``outputs/``: the class report, grades.csv, canvas.csv and each student's feedback, read from
  the gradebook.
- ``watch/``: grading as submissions arrive, a service over the wings above that hands each
  student's feedback back through nbgrader's exchange.
- ``gradescope/``: the course as a Gradescope autograder, built from the same plan, runner and
  checks; without bubblewrap its ``unprivileged`` module is a second trust boundary (the
  student's process as a user that cannot read the autograder's files) and needs the same review.

Beside them: ``workspace`` (where one run of the course keeps its files), ``timestamps``
(nbgrader's times), ``course`` (the lessons as the grader reads them), ``release`` (the student
notebooks), ``demo`` (a synthetic class) and nbgrader's configuration and formgrader hook.
docs/contributors/architecture.md draws the data paths.
"""
