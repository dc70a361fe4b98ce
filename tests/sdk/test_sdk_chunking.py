"""chunk_text (docs/adapters.md §0.4): paragraph/line boundaries, code fences, platform units."""

import pytest

from hermes_core.sdk.chunking import chunk_text, measure


def test_short_text_is_one_chunk():
    assert chunk_text("hello", 4096) == ["hello"]


def test_empty_and_blank_text_give_no_chunks():
    assert chunk_text("", 10) == []
    assert chunk_text("\n \n", 10) == []


def test_bad_limit_and_unit_are_rejected():
    with pytest.raises(ValueError, match="limit must be positive"):
        chunk_text("x", 0)
    with pytest.raises(ValueError, match="unknown length unit 'words'"):
        chunk_text("x", 10, "words")


def test_hard_split_of_one_long_word():
    assert chunk_text("a" * 10, 4) == ["aaaa", "aaaa", "aa"]


def test_long_line_splits_at_whitespace():
    assert chunk_text("alpha beta gamma delta", 12) == ["alpha beta ", "gamma delta"]


def test_cut_after_paragraph():
    text = "p1 " * 20 + "\n\n" + "p2 " * 20
    assert chunk_text(text, 100) == ["p1 " * 20, "p2 " * 20]


def test_cut_at_line_boundary_when_no_paragraph():
    text = "line one\nline two\nline three"
    assert chunk_text(text, 18) == ["line one\nline two", "line three"]


def test_code_fence_is_closed_and_reopened_with_its_language():
    text = "intro para\n\n```python\n" + "".join(f"x = {i}\n" for i in range(12)) + "```\n\noutro"
    chunks = chunk_text(text, 40)
    assert chunks == [
        "intro para\n\n```python\nx = 0\nx = 1\n```",
        "```python\nx = 2\nx = 3\nx = 4\nx = 5\n```",
        "```python\nx = 6\nx = 7\nx = 8\nx = 9\n```",
        "```python\nx = 10\nx = 11\n```\n\noutro",
    ]
    for chunk in chunks:
        assert len(chunk) <= 40
        assert chunk.count("```") % 2 == 0


def test_tilde_fence_and_long_code_line():
    text = "~~~\n" + "y" * 30 + "\n~~~"
    chunks = chunk_text(text, 20)
    assert all(len(c) <= 20 for c in chunks)
    assert all(c.startswith("~~~\n") and c.endswith("\n~~~") for c in chunks)
    assert "".join(c[4:-4] for c in chunks) == "y" * 30


def test_utf16_units_count_emoji_twice():
    # Telegram: 4096 UTF-16 code units; each 😀 is a surrogate pair (2 units).
    chunks = chunk_text("😀" * 3000, 4096, "utf16")
    assert [measure(c, "utf16") for c in chunks] == [4096, 1904]
    assert [len(c) for c in chunks] == [2048, 952]


def test_bytes_unit_counts_utf8():
    # Signal: 2000 UTF-8 bytes; é is 2 bytes.
    chunks = chunk_text("é" * 1500, 2000, "bytes")
    assert [len(c.encode("utf-8")) for c in chunks] == [2000, 1000]


def test_chunks_rejoin_to_the_text_outside_fences():
    text = "\n\n".join(f"paragraph {i} " + "word " * 15 for i in range(10))
    chunks = chunk_text(text, 200)
    assert all(len(c) <= 200 for c in chunks)
    assert "".join(chunks).replace("\n", "") == text.replace("\n", "")


def test_limit_too_small_for_fences_cuts_plain_text_within_the_limit():
    text = "```python\n" + "x" * 30 + "\n```"
    chunks = chunk_text(text, 12)  # reopening "```python\n" + closing "\n```" would cost 14
    assert all(len(c) <= 12 for c in chunks)
    assert "".join(chunks).replace("\n", "") == text.replace("\n", "")


def test_a_code_point_larger_than_the_limit_is_sent_alone():
    assert chunk_text("a😀b", 2, "bytes") == ["a", "😀", "b"]
