"""Grading: a submission's notebook planned, run in the sandbox, judged here, one result each.

The checks run in this process, the trusted side (``verdicts``); the student's process only
answers them, through ``grader.sandbox``. ``batch`` grades on this machine's cores, ``cluster``
on Dask workers; ``inspection`` reads the source for what a human should look at.
"""
