"""Outputs: what the gradebook says, written for people and other systems.

The class report (``report``, with ``alike``), each student's feedback page (``feedback``) and
Canvas's gradebook import (``canvas``). They only read the gradebook; ``render`` holds what the
pages share (the Jinja environment, how points are written).
"""
