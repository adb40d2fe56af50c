"""The one exception type cutimeline raises on misuse and bad input."""

__all__ = ["CutimelineError"]


class CutimelineError(Exception):
    """Misuse, a bad option, or a file or trace cutimeline cannot use.

    The message is a full sentence that names the bad value and the fix.
    """
