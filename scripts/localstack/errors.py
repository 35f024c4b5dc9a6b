"""The local stack's one error."""


class StackError(RuntimeError):
    """The stack could not start or stopped working; the message says what to look at."""
