"""Why a batch does not grade everything, for the command to say: the cluster cannot grade at all
(``ClusterError``, before anything runs), or some submissions were never graded
(``NotAllGraded``, at the end). Apart from Dask's module, so they are known without it."""


class ClusterError(Exception):
    """The cluster cannot grade (unreachable, or its workers cannot); the message says why."""


class NotAllGraded(Exception):
    """Some submissions were not graded, and not recorded: grading again goes on with them."""

    def __init__(self, reasons: list[str]):
        super().__init__(f"{len(reasons)} submission(s) not graded")
        self.reasons = reasons
