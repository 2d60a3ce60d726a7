"""The library's error hierarchy.

Every error the library raises on purpose is a ``TranscriberError``; the CLI turns one into a
single line and a non-zero exit. Errors are chained with ``from`` so the cause (ffmpeg's own
message, the OS error) is never lost.
"""


class TranscriberError(Exception):
    """Base of every error this library raises on purpose."""


class AudioError(TranscriberError):
    """The media could not be read or holds no audio."""


class ModelError(TranscriberError):
    """The model could not be found, converted or loaded."""


class OutputError(TranscriberError):
    """An output file could not be written."""
