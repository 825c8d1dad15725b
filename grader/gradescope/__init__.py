"""Gradescope: the course's checks as a Gradescope autograder, one zip per lesson.

Gradescope runs ``setup.sh`` once to build its container image, then ``run_autograder`` once per
submission, with the student's files in ``/autograder/submission``, and reads
``/autograder/results/results.json`` (its specification: ``docs/specs.md`` of the
``gradescope/autograder_samples`` repository). Modules, one concept each:

- ``layout``: where the autograder's files are (``/autograder`` unless the environment says);
- ``settings``: what a zip is built for (its lesson, who sees which test, when);
- ``build``: the zip (``setup.sh``, ``run_autograder``, the course's files);
- ``finding``: which file of the submission is the notebook;
- ``unprivileged``: the student's process as a user that cannot read the autograder's files,
  where bubblewrap cannot run;
- ``grading``: one notebook graded with the same checks as ``python -m grader grade``, the
  checks a student sees judged apart from the hidden ones;
- ``results``: the results.json Gradescope reads;
- ``run``: what ``run_autograder`` does, from the submission to results.json;
- ``container``: Gradescope's limits (768 MB, half a CPU) approximated here, for the tests and
  the benchmark.
"""
