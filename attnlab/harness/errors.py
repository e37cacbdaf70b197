"""The suite's exceptions; scripts turn each into one line on stderr and an exit status."""


class UsageError(Exception):
    """Bad input found after parsing (e.g. an unwritable output path): exit status 2."""


class DataError(Exception):
    """A CSV a downstream stage needs is missing or malformed: exit status 2."""


class RunError(Exception):
    """A run that cannot go on, e.g. a loss that turned NaN: exit status 1."""
