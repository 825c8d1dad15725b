"""The trust boundary: the only code that runs student code or reads what its process sends.

Everything here needs a security review when it changes. ``runner`` and what it imports
(``confinement``) run inside the sandbox, where the grader's other files are not visible;
``bwrap`` builds the sandbox around them, ``package`` the course package the student's process
sees. The rest of the grader never runs student code: it talks to it through these modules.
"""
