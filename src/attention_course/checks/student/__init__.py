"""The student's side of the checks: the only part of them that runs in the student's process.

While a submission is graded, these modules run inside the grading sandbox, beside the
student's code (``grader/sandbox/package.py`` ships them, and nothing else of the checks): they
call the student's objects on the cases the grader sends (``observing``), build what a case
needs around them (``harness``), carry plain values both ways (``wire``) and watch for the
built-ins an exercise forbids (``shortcuts``). Nothing here judges, and nothing here is
trusted by the grader; a change here needs a security review all the same, since it runs where
a hostile student's code does.
"""
