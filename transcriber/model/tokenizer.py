"""Whisper's tokenizer, built into a ``tiktoken.Encoding`` from the model's own files.

openai/whisper ships its BPE ranks as ``gpt2.tiktoken`` / ``multilingual.tiktoken`` assets; we
cannot download those, but every model folder carries the same vocabulary, either as a Hugging
Face ``tokenizer.json`` (``model.vocab``: byte-level string -> id) or as CTranslate2's
``vocabulary.txt`` (one byte-level string per line, line index = id). For GPT-2-style BPE a
token's id *is* its merge rank, so mapping each byte-level string back to raw bytes gives
tiktoken's ``mergeable_ranks`` directly; where the files carry the merge list (Hugging Face's
``tokenizer.json`` or ``merges.txt``), that is checked: each merge must make a later id. The
special tokens are then laid out after the regular vocabulary exactly as openai/whisper does,
and checked against whatever the files list (``added_tokens``, ``added_tokens.json``).

English-only models (``*.en``) use GPT-2's vocabulary: 50256 regular tokens, ``<|endoftext|>`` =
50256. Multilingual models have 50257 regular tokens, ``<|endoftext|>`` = 50257.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Iterable

import tiktoken

from transcriber.constants import TIME_PRECISION
from transcriber.errors import ModelError
from transcriber.transcript.text import NO_SPACE_LANGUAGES

# Whisper's language table, in token order: the n-th entry is token ``sot + 1 + n``.
LANGUAGES: dict[str, str] = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak",
    "te": "telugu", "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian",
    "az": "azerbaijani", "sl": "slovenian", "kn": "kannada", "et": "estonian",
    "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian",
    "sw": "swahili", "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala",
    "km": "khmer", "sn": "shona", "yo": "yoruba", "so": "somali", "af": "afrikaans",
    "oc": "occitan", "ka": "georgian", "be": "belarusian", "tg": "tajik", "sd": "sindhi",
    "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek",
    "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk",
    "mt": "maltese", "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan",
    "tl": "tagalog", "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian",
    "ln": "lingala", "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese",
    "yue": "cantonese",
}


N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>

# GPT-2's pre-tokenizer regex (tiktoken's "gpt2" pattern), also used by Whisper.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Names that Hugging Face's (and so CTranslate2's) Whisper vocabularies give some special tokens:
# <|nospeech|>'s first name, and Hebrew's old ISO 639 code. Same ids, Whisper's names win.
_SPECIAL_ALIASES = {"<|nocaptions|>": "<|nospeech|>", "<|iw|>": "<|he|>"}


@lru_cache(maxsize=1)
def _unicode_to_bytes() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: printable stand-in character -> byte value.

    GPT-2 keeps the 188 printable Latin-1 bytes as themselves and maps the rest (control bytes,
    space, ...) to code points 256, 257, ... in byte order, so every byte string is a printable
    string with no whitespace (hence one token per line in vocabulary.txt).
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _to_bytes(token: str) -> bytes:
    table = _unicode_to_bytes()
    try:
        return bytes(table[ch] for ch in token)
    except KeyError as exc:
        raise ModelError(f"vocabulary entry {token!r} is not byte-level BPE") from exc


def special_token_names(num_languages: int = 99) -> list[str]:
    """Whisper's special tokens in id order, starting at ``<|endoftext|>``."""
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *[f"<|{code}|>" for code in list(LANGUAGES)[:num_languages]],
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
        *[f"<|{i * TIME_PRECISION:.2f}|>" for i in range(N_TIMESTAMPS)],
    ]


def _read_vocabulary(model_dir: Path) -> tuple[dict[str, int], dict[str, int], str, list | None]:
    """The model's vocabulary as ``(vocab, listed_specials, source file name, merges)``.

    ``vocab`` maps byte-level strings to ids (it may include ``<|endoftext|>``);
    ``listed_specials`` maps the special tokens the file names to the ids it gives them;
    ``merges`` is the BPE merge list when the files have one (Hugging Face's), else None.
    """
    tokenizer_json = model_dir / "tokenizer.json"
    if tokenizer_json.is_file():
        data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        model = data.get("model", {})
        if model.get("type", "BPE") != "BPE":
            raise ModelError(f"{tokenizer_json}: a {model['type']} tokenizer; Whisper's is byte-level BPE")
        if model.get("vocab"):
            listed = {t["content"]: t["id"] for t in data.get("added_tokens", [])}
            return dict(model["vocab"]), listed, tokenizer_json.name, model.get("merges")
    vocab_json = model_dir / "vocab.json"  # Hugging Face's slow-tokenizer files
    if vocab_json.is_file():
        vocab = json.loads(vocab_json.read_text(encoding="utf-8"))
        added = model_dir / "added_tokens.json"
        listed = json.loads(added.read_text(encoding="utf-8")) if added.is_file() else {}
        merges_txt = model_dir / "merges.txt"
        merges = None
        if merges_txt.is_file():
            lines = merges_txt.read_text(encoding="utf-8").split("\n")
            merges = [line for line in lines if line and not line.startswith("#version")]
        return vocab, listed, vocab_json.name, merges
    for name in ("vocabulary.txt", "vocabulary.json"):  # CTranslate2 (.json since 3.x)
        path = model_dir / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            # split("\n"), not splitlines(): the latter also breaks on \x85, \u2028, ...
            lines = json.loads(text) if name.endswith(".json") else text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            vocab = {line: i for i, line in enumerate(lines)}
            listed = {line: i for line, i in vocab.items() if line.startswith("<|")}
            return vocab, listed, name, None
    raise ModelError(f"no tokenizer.json, vocab.json or vocabulary.txt in {model_dir}")


def _check_merge_order(vocab: dict[str, int], merges: list, where: str) -> None:
    """tiktoken merges the pair whose result has the lowest id; Hugging Face's BPE the pair
    listed first in ``merges``. They split text alike when each merge's result has a larger id
    than the one before (as in GPT-2's and Whisper's vocabularies, numbered in merge order)."""
    last = -1
    for n, merge in enumerate(merges, 1):
        token = "".join(merge.split(" ") if isinstance(merge, str) else merge)
        if vocab.get(token, -1) <= last:
            raise ModelError(f"{where}: merge {n} ({merge!r}) does not make the next token by id, so "
                             f"ids are not merge ranks: not a Whisper vocabulary tiktoken can read")
        last = vocab[token]


@lru_cache(maxsize=8)
def _build_encoding(model_dir: Path, multilingual: bool, num_languages: int) -> tiktoken.Encoding:
    vocab, listed, source, merges = _read_vocabulary(model_dir)
    if merges is not None:
        _check_merge_order(vocab, merges, f"{model_dir / ('merges.txt' if source == 'vocab.json' else source)}")

    eot = listed.get("<|endoftext|>", vocab.get("<|endoftext|>"))
    expected_eot = 50257 if multilingual else 50256
    if eot is None:
        raise ModelError(f"{model_dir / source} has no <|endoftext|> token")
    if eot != expected_eot:
        kind = "multilingual" if multilingual else "English-only"
        raise ModelError(
            f"{model_dir / source}: <|endoftext|> is {eot}, but a {kind} Whisper vocabulary "
            f"puts it at {expected_eot}"
        )

    ranks = {_to_bytes(token): i for token, i in vocab.items() if i < eot}
    if len(ranks) != eot or set(ranks.values()) != set(range(eot)):
        raise ModelError(f"{model_dir / source}: regular token ids are not exactly 0..{eot - 1}")

    specials = {name: eot + i for i, name in enumerate(special_token_names(num_languages))}
    for name, token_id in listed.items():
        name = _SPECIAL_ALIASES.get(name, name)
        if specials.get(name) != token_id:
            raise ModelError(
                f"{model_dir / source} puts {name} at id {token_id}, Whisper's layout with "
                f"{num_languages} languages at {specials.get(name)}"
            )

    return tiktoken.Encoding(
        name=f"whisper-{'multilingual' if multilingual else 'gpt2'}",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=specials,
        explicit_n_vocab=len(ranks) + len(specials),
    )


def _language_code(language: str, num_languages: int) -> str:
    """A language code from a code or an English name ("en", "English")."""
    key = language.lower()
    codes = list(LANGUAGES)[:num_languages]
    if key in codes:
        return key
    by_name = {LANGUAGES[code]: code for code in codes}
    if key in by_name:
        return by_name[key]
    raise ValueError(f"unsupported language {language!r}; expected one of {', '.join(codes)}")


def load_tokenizer(
    model_dir: Path | str,
    *,
    multilingual: bool,
    num_languages: int = 99,
    language: str | None = None,
    task: str = "transcribe",
) -> Tokenizer:
    """Whisper's tokenizer for the model in ``model_dir``.

    Like openai/whisper's ``get_tokenizer``: a multilingual tokenizer defaults to English when no
    language is given (detect the language first, then ask for its tokenizer); an English-only
    one accepts only English and always transcribes. The ``tiktoken.Encoding`` is built once per
    (folder, multilingual, num_languages), so asking for another language or task is cheap.
    """
    if task not in ("transcribe", "translate"):
        raise ValueError(f"task must be 'transcribe' or 'translate', not {task!r}")
    if not 1 <= num_languages <= len(LANGUAGES):
        raise ValueError(f"num_languages must be between 1 and {len(LANGUAGES)}")
    language = _language_code(language or "en", num_languages)
    if not multilingual:
        if language != "en" or task != "transcribe":
            raise ValueError("an English-only model can only transcribe English")
    encoding = _build_encoding(Path(model_dir).resolve(), multilingual, num_languages)
    return Tokenizer(encoding, language, task, multilingual, num_languages)


@dataclass(frozen=True)
class Tokenizer:
    """Whisper's tokens for one model, language and task. Token ids are plain ints."""

    encoding: tiktoken.Encoding
    language: str
    task: str
    multilingual: bool
    num_languages: int = 99

    # -- special tokens -------------------------------------------------------------------------

    def _special(self, name: str) -> int:
        return self.encoding.encode_single_token(name)

    @cached_property
    def eot(self) -> int:
        return self._special("<|endoftext|>")

    @cached_property
    def sot(self) -> int:
        return self._special("<|startoftranscript|>")

    @cached_property
    def translate(self) -> int:
        return self._special("<|translate|>")

    @cached_property
    def transcribe(self) -> int:
        return self._special("<|transcribe|>")

    @cached_property
    def sot_lm(self) -> int:
        return self._special("<|startoflm|>")

    @cached_property
    def sot_prev(self) -> int:
        return self._special("<|startofprev|>")

    @cached_property
    def no_speech(self) -> int:
        return self._special("<|nospeech|>")

    @cached_property
    def no_timestamps(self) -> int:
        return self._special("<|notimestamps|>")

    @cached_property
    def timestamp_begin(self) -> int:
        """Id of ``<|0.00|>``; token ``timestamp_begin + i`` is ``i * 0.02`` seconds."""
        return self._special("<|0.00|>")

    @cached_property
    def all_language_codes(self) -> tuple[str, ...]:
        return tuple(LANGUAGES)[: self.num_languages]

    @cached_property
    def all_language_tokens(self) -> tuple[int, ...]:
        return tuple(self.sot + 1 + i for i in range(self.num_languages))

    def to_language_token(self, code: str) -> int:
        """Token id of a language code ("de" -> ``<|de|>``)."""
        code = _language_code(code, self.num_languages)
        return self.sot + 1 + self.all_language_codes.index(code)

    @cached_property
    def language_token(self) -> int:
        return self.to_language_token(self.language)

    @cached_property
    def sot_sequence(self) -> tuple[int, ...]:
        """The decoder prompt's start: ``(sot, language, task)``; just ``(sot,)`` for *.en."""
        if not self.multilingual:
            return (self.sot,)
        task_token = self.transcribe if self.task == "transcribe" else self.translate
        return (self.sot, self.language_token, task_token)

    @cached_property
    def sot_sequence_including_notimestamps(self) -> tuple[int, ...]:
        return (*self.sot_sequence, self.no_timestamps)

    # -- text -----------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Ordinary text to ids; text that looks like ``<|...|>`` is encoded as plain text."""
        return self.encoding.encode_ordinary(text)

    def decode(self, tokens: Iterable[int]) -> str:
        """Text of the regular tokens; special and timestamp tokens (ids >= eot) are dropped."""
        return self.encoding.decode([int(t) for t in tokens if int(t) < self.eot])

    def decode_with_timestamps(self, tokens: Iterable[int]) -> str:
        """Text of all tokens, specials written out: ``"<|1.08|> Hello<|1.50|>"``."""
        return self.encoding.decode([int(t) for t in tokens])

    def non_speech_tokens(self) -> tuple[int, ...]:
        """Sorted ids of symbol tokens to suppress so the model does not write them as speech.

        openai/whisper's list: speaker tags and annotations ("- ", "[", "(", "♪", ...) that
        transcripts of the training data were full of. A hyphen or quote *between* words stays
        allowed; only their space-prefixed, word-initial forms are suppressed.
        """
        return self._non_speech_tokens

    @cached_property
    def _non_speech_tokens(self) -> tuple[int, ...]:
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
        # U+2640..U+267F symbols may be several tokens; their UTF-8 forms share the first two
        # bytes, so suppressing the first token is safe for the whole block.
        miscellaneous = set("♩♪♫♬♭♮♯")
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + sorted(miscellaneous):
            for tokens in (self.encode(symbol), self.encode(" " + symbol)):
                if len(tokens) == 1 or symbol in miscellaneous:
                    result.add(tokens[0])
        return tuple(sorted(result))

    # -- words ----------------------------------------------------------------------------------

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Group tokens into words: ``(words, word_tokens)`` with ``"".join(words)`` the text.

        Languages without spaces split on whole Unicode characters, as openai/whisper does for
        zh, ja, th, lo, my and yue; the others, and every translation (its text is English),
        split before a token that starts with a space. Unlike openai/whisper (which splits punctuation off
        and re-attaches it later in ``merge_punctuations``), punctuation without a leading space
        stays with the word before it: ``" Hello", ","`` -> ``" Hello,"``. Special tokens (ids
        >= eot, timestamps included) are always words of their own.
        """
        if self.language in NO_SPACE_LANGUAGES and self.task == "transcribe":
            return self.split_tokens_on_unicode(tokens)
        return self.split_tokens_on_spaces(tokens)

    def split_tokens_on_unicode(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Split into the shortest token runs that decode to whole Unicode characters.

        A byte-level token can end inside a multi-byte UTF-8 character; decoding it alone then
        gives U+FFFD. Tokens are accumulated until the run decodes cleanly, unless the full
        text itself has a U+FFFD at that place (invalid bytes that never become a character).
        """
        decoded_full = self.decode_with_timestamps(tokens)
        replacement = "\ufffd"
        words: list[str] = []
        word_tokens: list[list[int]] = []
        current: list[int] = []
        offset = 0
        for token in tokens:
            current.append(int(token))
            decoded = self.decode_with_timestamps(current)
            if replacement not in decoded or self._is_replacement_in_full(
                decoded_full, offset + decoded.index(replacement)
            ):
                words.append(decoded)
                word_tokens.append(current)
                current = []
                offset += len(decoded)
        if current:  # a trailing partial character: keep it rather than lose tokens
            words.append(self.decode_with_timestamps(current))
            word_tokens.append(current)
        return words, word_tokens

    @staticmethod
    def _is_replacement_in_full(decoded_full: str, position: int) -> bool:
        return position < len(decoded_full) and decoded_full[position] == "\ufffd"

    def split_tokens_on_spaces(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        subwords, subword_tokens = self.split_tokens_on_unicode(tokens)
        words: list[str] = []
        word_tokens: list[list[int]] = []
        previous_special = True  # so the first subword always starts a word
        for subword, sub_tokens in zip(subwords, subword_tokens):
            special = sub_tokens[0] >= self.eot
            starts_word = subword.startswith(" ") or subword.isspace()
            if special or previous_special or starts_word:
                words.append(subword)
                word_tokens.append(list(sub_tokens))
            else:  # a word piece or trailing punctuation: part of the current word
                words[-1] += subword
                word_tokens[-1].extend(sub_tokens)
            previous_special = special
        return words, word_tokens

