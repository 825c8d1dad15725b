"""After a kernel restart, or with cells run out of order, a check cell's names are undefined:
in a notebook, a NameError also says what to run.

``install()`` is called when the checks are imported in an IPython kernel (JupyterLab, Colab,
nbval); elsewhere (plain Python, the grader's runner, which imports the checks before any shell
exists) it does nothing. Right after a restart nothing of the course is imported yet, so `make
lab`'s kernel also loads this module as an IPython extension when it starts (it imports nothing
but IPython): the first cell run after a restart gets the hint too.
"""

HINT = ("Hint: `{name}` is defined in a cell above this one. After a kernel restart, or when "
        "cells ran out of order, run the cells above first (Run > Run All Above Selected Cell), "
        "then this cell again.")


def explain_name_error(shell, etype, value, tb, tb_offset=None):
    """IPython's usual traceback for the NameError, then what to run."""
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    print(HINT.format(name=getattr(value, "name", None) or "this name"))


def install(shell=None) -> None:
    """Explain NameErrors in ``shell``, by default the running IPython's (none: nothing)."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
    if shell is not None and not shell.custom_exceptions:
        shell.set_custom_exc((NameError,), explain_name_error)


load_ipython_extension = install  # %load_ext attention_course.restart, or a kernel's extensions
