"""Error types. A UserError is the user's mistake: the CLI prints its message on one line and exits 2,
never a traceback."""

from .redaction import scrub


class UserError(Exception):
    """Bad input from the user (flags, files, specs). Message is shown as-is, on one line."""

    exit_code = 2


class DataError(UserError):
    """A data file is missing, corrupt or malformed. Message should read `file:line: problem`."""

    def __init__(self, path, problem: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else f"{path}"
        # A problem may quote the file, and a data file may be anything (/proc/self/environ): keys out,
        # then bounded. data.loaders.excerpt is the way to quote; this is the backstop for every caller.
        problem = scrub(problem)
        problem = problem if len(problem) <= 400 else problem[:400] + "..."
        super().__init__(f"{where}: {problem}")
        self.path, self.line, self.problem = path, line, problem
