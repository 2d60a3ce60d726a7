"""The library's error hierarchy.

Every error the library raises on purpose is a ``TranscriberError``; the CLI turns one into a
single line and a non-zero exit. Errors are chained with ``from`` so the cause (ffmpeg's own
message, the OS error) is never lost.
"""


class TranscriberError(Exception):
    """Base of every error this library raises on purpose."""


class AudioError(TranscriberError):
    """The media could not be read or holds no audio."""


class RunFault(TranscriberError):
    """A fault no input file can cause, the machine's or the model's: a job runner stops at once
    with one line, its files left queued with no attempt counted."""


class ModelError(RunFault):
    """The model could not be found, converted or loaded."""


class ToolError(RunFault):
    """A program this library runs (ffmpeg, ffprobe) cannot start on this machine."""


def no_space(error: BaseException) -> bool:
    """Whether ``error`` is a disk's (or the temporary folder's) lack of space, whatever raised
    it (an OSError, MLX's RuntimeError when its compile step cannot write)."""
    return getattr(error, "errno", None) == 28 or "No space left on device" in str(error)


class OutputError(TranscriberError):
    """An output file could not be written."""
