"""ModelDimensions: a Whisper's sizes (its config), checked before anything is allocated.

Light (no MLX): the loader reads a config, and the CLI asks whether a model is multilingual,
before a model is built.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# What any Whisper's config holds (tiny to large-v3 and the distilled ones), with room; a config
# outside is refused when the model loads, before a file is transcribed.
DIMENSION_BOUNDS = {"n_mels": (80, 128), "n_audio_ctx": (1, 1500), "n_audio_state": (2, 4096), "n_audio_head": (1, 64),
                    "n_audio_layer": (1, 64), "n_vocab": (51864, 52000), "n_text_ctx": (1, 448),
                    "n_text_state": (2, 4096), "n_text_head": (1, 64), "n_text_layer": (1, 64)}
MAX_PARAMETERS = 2_000_000_000  # large-v3: 1.55 billion


@dataclass(frozen=True)
class ModelDimensions:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    def __post_init__(self) -> None:
        """ValueError, naming the entry, for dimensions no Whisper has: checked before anything
        is allocated (a config of 10^9 dimensions would allocate until memory runs out)."""
        for name, (low, high) in DIMENSION_BOUNDS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name} {value!r} is not from {low} to {high}")
        for state, head in (("n_audio_state", "n_audio_head"), ("n_text_state", "n_text_head")):
            if getattr(self, state) % getattr(self, head):
                raise ValueError(f"{head} {getattr(self, head)} does not divide {state} {getattr(self, state)}")
        if self.n_parameters() > MAX_PARAMETERS:
            raise ValueError(f"{self.n_parameters():,} parameters, more than any Whisper ({MAX_PARAMETERS:,})")

    def n_parameters(self) -> int:
        """About how many weights a model of these dimensions has (4 d^2 per attention, 8 d^2
        per MLP; the text decoder's layers attend twice; the token embedding)."""
        audio, text = self.n_audio_state, self.n_text_state
        return (self.n_audio_layer * 12 * audio * audio + self.n_text_layer * 16 * text * text
                + self.n_vocab * text + self.n_text_ctx * text + self.n_mels * audio * 3)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelDimensions":
        """ValueError (or KeyError) for a config that is not one of a Whisper."""
        values = {}
        for k in cls.__dataclass_fields__:
            if not isinstance(d[k], (int, float)) or isinstance(d[k], bool) or d[k] != int(d[k]):
                raise ValueError(f"{k} {d[k]!r} is not a whole number")
            values[k] = int(d[k])
        return cls(**values)

    @property
    def is_multilingual(self) -> bool:
        """English-only vocabularies (GPT-2's) have 51864 tokens; multilingual ones more."""
        return self.n_vocab >= 51865

    @property
    def num_languages(self) -> int:
        """The language tokens the vocabulary has (99 for most models, 100 for large-v3)."""
        return self.n_vocab - 51765 - int(self.is_multilingual)

    def to_dict(self) -> dict:
        return asdict(self)
