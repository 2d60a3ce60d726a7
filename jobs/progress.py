"""tqdm progress bars, in seconds of audio."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from transcriber.audio import probe


class FileProgress:
    """One bar per file, in audio seconds; ``update(seconds_done)`` moves it to a position."""

    def __init__(self, path: Path, disable: bool = False):
        self.path, self.disable = path, disable
        self.bar = None

    def __enter__(self) -> "FileProgress":
        if not self.disable:
            try:
                total = probe(self.path) or None
            except Exception:  # the transcription itself reports a bad file
                total = None
            self.bar = tqdm(total=round(total, 1) if total else None, desc=self.path.name[:40], unit="s",
                            unit_scale=False, leave=False, dynamic_ncols=True,
                            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total_fmt} s [{elapsed}<{remaining}]")
        return self

    def update(self, seconds: float) -> None:
        if self.bar is not None:
            target = min(seconds, self.bar.total) if self.bar.total else seconds
            self.bar.update(max(0.0, target - self.bar.n))

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            if exc[0] is None and self.bar.total:
                self.update(self.bar.total)
            self.bar.close()
