"""The error hierarchy: every user-facing failure is a KvAdvisorError with a stable slug."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import Enum


def _more_problems(n: int) -> str:
    """The count of further problems with the noun in number: 1 more problem, 3 more problems.

    errors is a leaf package: it cannot import units.plural.
    """
    return f"{n} more problem{'' if n == 1 else 's'}"


class KvAdvisorError(Exception):
    """Root of every error caused by user input; the CLI turns it into one line and exit 2.

    Where Python has a standard exception for the mistake, the subclass is one too: a bad value
    (option, trace value, catalog, rule or plan content) is a ValueError, a missing trace a
    FileNotFoundError, so a notebook's ``except ValueError`` works as it does elsewhere.

    ``slug`` names the section of docs/errors.md that explains the error; the CLI's hint is
    ``kvadvisor docs errors#<slug>``, which prints it (the docs ship in the package).
    """

    slug = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(KvAdvisorError, ValueError):
    """Bad option or configuration value (a ValueError too, for Python callers)."""

    slug = "config"


class TraceError(KvAdvisorError):
    """A trace cannot be used."""

    slug = "trace"


class TraceFormatError(TraceError):
    """Unknown or unsniffable format, unreadable or corrupt file."""

    slug = "trace-format"


class TraceNotFoundError(TraceFormatError, FileNotFoundError):
    """The trace path names nothing (or a dangling link): a FileNotFoundError for Python callers.

    Python code catches it as FileNotFoundError; the CLI, as every KvAdvisorError, prints its
    one line and exits 2.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.errno = errno.ENOENT
        self.filename = path


class TraceProblem(str, Enum):
    """Stable reason codes for problems found while validating a trace (pandera's idiom)."""

    MISSING_COLUMN = "missing_column"
    WRONG_TYPE = "wrong_type"
    NULL_VALUE = "null_value"
    NAN_VALUE = "nan_value"
    NEGATIVE_VALUE = "negative_value"
    DUPLICATE_ID = "duplicate_id"
    HASH_COUNT_MISMATCH = "hash_count_mismatch"
    UNPARSEABLE = "unparseable"
    LENGTH_MISMATCH = "length_mismatch"
    NOT_FINITE = "not_finite"
    OUT_OF_RANGE = "out_of_range"
    NOT_UTF8 = "not_utf8"


@dataclass(frozen=True)
class Problem:
    """One problem in one cell: 1-based data row (None: whole column), column, reason, value."""

    row: int | None
    column: str
    reason: TraceProblem
    value: str


class TraceSchemaError(TraceError, ValueError):
    """Validation found problems; all of them are kept in ``problems`` (collected lazily).

    A ValueError too: the trace's values are wrong.
    """

    slug = "trace-schema"

    def __init__(self, path: str, problems: list[Problem], total: int | None = None) -> None:
        self.path = path
        self.problems = problems
        self.total = len(problems) if total is None else total
        first = problems[0]
        where = f"row {first.row}, " if first.row is not None else ""
        more = ""
        if self.total > 1:
            rows = [str(p.row) for p in problems[1:4] if p.row is not None]
            also = f", next at rows {', '.join(rows)}" if rows else ""
            more = f" (and {_more_problems(self.total - 1)}{also})"
        super().__init__(
            f"{path}: {where}column '{first.column}': {first.reason.value}: {first.value}{more}"
        )


class DocumentError(KvAdvisorError, ValueError):
    """A YAML document (plan, rule, catalog) has problems: ``problems`` holds every one.

    kvadvisor.checker collects them, one line each (file, line, key path, what, how to fix);
    the message is the first and a count of the rest, and the CLI prints them all.
    """

    def __init__(self, message: str, problems: tuple[str, ...] | list[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)


class CatalogError(DocumentError):
    """A catalog file or entry is invalid or unknown (message names file and key path)."""

    slug = "catalog"


class CatalogProblems(CatalogError):
    """A catalog file has problems; all of them are kept in ``problems`` (collected lazily).

    The message is the first problem and a count of the rest, so the CLI's one line stays one
    line; ``kvadvisor catalog check FILE`` prints every one.
    """

    def __init__(self, path: str, problems: list[str] | tuple[str, ...]) -> None:
        self.path = path
        more = ""
        if len(problems) > 1:
            more = (
                f" (and {_more_problems(len(problems) - 1)}; `kvadvisor catalog check {path}` "
                "lists them all)"
            )
        super().__init__(problems[0] + more, tuple(problems))


class RuleError(DocumentError):
    """A rule file is invalid.

    ``problems`` holds every problem found (the message shows the first and counts the rest,
    so the CLI's one line stays one line; ``kvadvisor rules check DIR`` prints them all).
    """

    slug = "rule"


class RuleSyntaxError(RuleError):
    """YAML or structure error in a rule file (message names file and key path)."""

    slug = "rule-syntax"


class RuleReferenceError(RuleError):
    """A rule names a fact that does not exist (message suggests the closest names)."""

    slug = "rule-reference"


class PlanError(DocumentError):
    """A plan file is invalid (every problem names file, line, key path and how to fix it)."""

    slug = "plan"


class KvAdvisorWarning(UserWarning):
    """Something the user should know, e.g. rows dropped or timestamps in a suspicious unit."""
