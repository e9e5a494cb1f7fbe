"""Cutting a document into chunks by tokens, with overlap, along its structure.

Tokens are counted the way a BERT tokenizer splits text before its word pieces: words (long ones
in pieces of 12 characters) and single punctuation marks. English prose makes about 1.2 word
pieces of each, so a 200-token chunk fits all-MiniLM-L6-v2's 256-piece window; counting here
needs no round trip to the engine, and the engine cuts the rare longer chunk (CJK, base64).

Structure: a Markdown heading (and an HTML or DOCX one, which the readers turn into Markdown)
always starts a chunk and is kept with every chunk under it; a chunk ends at a blank line where
one is near the limit, and a fenced code block is not cut where it can be kept whole; a PDF's
chunks never cross a page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from deskllm.documents.readers import Section

CHUNK_TOKENS = 200
OVERLAP_TOKENS = 32
TOKEN = re.compile(r"\w{1,12}|[^\w\s]")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)
BLANK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class Chunk:
    text: str
    start: int  # character offsets in the section's text
    end: int
    page: int | None = None
    heading: str = ""  # the headings above it, outermost first, joined by " › "


def _headings(text: str) -> list[tuple[int, int, str]]:
    """(offset, level, title) of each Markdown heading outside fenced code blocks."""
    fences = [m.start() for m in FENCE.finditer(text)]
    inside = []  # (start, end) of fenced blocks
    for a, b in zip(fences[::2], fences[1::2], strict=False):
        inside.append((a, b))
    found = []
    for m in HEADING.finditer(text):
        if any(a < m.start() < b for a, b in inside):
            continue
        title = m.group(2).replace("`", "").strip()  # `--parallel N` reads as --parallel N
        found.append((m.start(), len(m.group(1)), title))
    return found


def _soft_breaks(text: str) -> set[int]:
    """Offsets where a chunk may end well: blank lines, outside fenced code where possible."""
    breaks = {m.end() for m in BLANK.finditer(text)}
    fences = [m.start() for m in FENCE.finditer(text)]
    for a, b in zip(fences[::2], fences[1::2], strict=False):
        breaks = {x for x in breaks if not a < x < b}
        breaks.add(a)
    return breaks


def chunk_section(
    section: Section,
    markdown: bool = True,
    size: int = CHUNK_TOKENS,
    overlap: int = OVERLAP_TOKENS,
) -> list[Chunk]:
    text = section.text
    spans = [(m.start(), m.end()) for m in TOKEN.finditer(text)]
    if not spans:
        return []
    starts = [a for a, _ in spans]
    headings = _headings(text) if markdown else []
    hard = sorted({_token_at(starts, off) for off, _, _ in headings} - {0})
    soft = sorted({_token_at(starts, off) for off in _soft_breaks(text)})
    chunks = []
    i, n = 0, len(spans)
    while i < n:
        limit = min(i + size, n)
        next_hard = next((h for h in hard if h > i), n)
        if next_hard <= limit:
            end = next_hard
        else:
            end = limit
            if limit < n:  # end at the last good break in the chunk's second half
                good = [s for s in soft if i + size // 2 < s <= limit]
                if good:
                    end = good[-1]
        start_char, end_char = spans[i][0], spans[end - 1][1]
        chunks.append(
            Chunk(
                text[start_char:end_char],
                start_char,
                end_char,
                section.page,
                _heading_path(headings, start_char),
            )
        )
        if end >= n:
            break
        # Overlap within a part, never back across a heading.
        i = end if end == next_hard else max(end - overlap, i + 1)
    return chunks


def _token_at(starts: list[int], offset: int) -> int:
    import bisect

    return bisect.bisect_left(starts, offset)


def _heading_path(headings: list[tuple[int, int, str]], offset: int) -> str:
    path: list[tuple[int, str]] = []
    for at, level, title in headings:
        if at > offset:
            break
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
    return " › ".join(title for _, title in path)


def chunk_document(kind: str, sections: Iterable[Section]) -> list[Chunk]:
    markdown = kind in ("markdown", "html", "docx")
    return [c for section in sections for c in chunk_section(section, markdown=markdown)]
