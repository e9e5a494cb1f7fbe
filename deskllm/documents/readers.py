"""Reading a file's text for indexing: plain text, Markdown, code, HTML, PDF and DOCX.

PDFs are read with pypdf (pure Python, well kept, reads page by page so a chunk keeps its page)
and DOCX with python-docx (small, and its paragraphs carry their heading styles); markitdown
would read both but brings a dozen other converters' dependencies into a desktop install. HTML
goes through the standard library's parser. A file that cannot be read raises Skip with the
reason the user sees.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

MAX_TEXT_BYTES = 32 * 1024 * 1024  # a text file larger than this is a log or a dump
MAX_BINARY_DOC_BYTES = 256 * 1024 * 1024  # PDF and DOCX
SNIFF_BYTES = 8192

MARKDOWN = {".md", ".markdown", ".mdx", ".rst"}
TEXT = {".txt", ".text", ".log", ".csv", ".tsv", ".org", ".tex", ".adoc"}
CODE = {
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs",
    ".java", ".kt", ".go", ".rs", ".rb", ".php", ".swift", ".m", ".scala", ".sh", ".bash",
    ".zsh", ".ps1", ".sql", ".r", ".lua", ".pl", ".json", ".yaml", ".yml", ".toml", ".ini",
    ".cfg", ".xml", ".css", ".scss", ".vue", ".dart", ".ex", ".exs", ".hs", ".ml", ".cmake",
}  # fmt: skip
HTML = {".html", ".htm", ".xhtml"}
PDF = {".pdf"}
DOCX = {".docx"}


class Skip(Exception):  # noqa: N818 (it is not an error: the file is listed with its reason)
    """This file is not indexed; `str(skip)` says why in the user's words."""


class Changing(Skip):
    """The file is being written: it is read on a later pass, once it holds still."""

    def __init__(self) -> None:
        super().__init__("changed while it was read; it is read again on the next pass")


@dataclass(frozen=True)
class Section:
    """A run of a file's text: the whole text, or one PDF page (`page` counts from 1)."""

    text: str
    page: int | None = None


@dataclass(frozen=True)
class Document:
    kind: str  # "markdown", "text", "code", "html", "pdf", "docx"
    sections: tuple[Section, ...]
    size: int
    mtime_ns: int


def kind_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    for kind, suffixes in (("markdown", MARKDOWN), ("text", TEXT), ("code", CODE),
                           ("html", HTML), ("pdf", PDF), ("docx", DOCX)):  # fmt: skip
        if suffix in suffixes:
            return kind
    return None


def size_limit(kind: str) -> int:
    return MAX_BINARY_DOC_BYTES if kind in ("pdf", "docx") else MAX_TEXT_BYTES


def _size_words(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_file(path: Path) -> os.stat_result:
    """The file's stat, or Skip: not a regular file (a FIFO or device: opening one could block
    for ever), not a type deskllm reads, or too large."""
    try:
        st = path.stat()
    except OSError as e:
        raise Skip(f"cannot be read: {e.strerror or e}") from e
    if not stat.S_ISREG(st.st_mode):
        raise Skip("not a regular file (a pipe, socket or device)")
    kind = kind_of(path)
    if kind is None:
        raise Skip(f"not a document type deskllm reads ({path.suffix or 'no extension'})")
    limit = size_limit(kind)
    if st.st_size > limit:
        raise Skip(f"too large ({_size_words(st.st_size)}; the limit is {_size_words(limit)})")
    return st


def read_document(path: Path, listed: tuple[int, int] | None = None) -> Document:
    """The file's text in sections. Raises Skip when it cannot be read, or when it changed
    while it was read, or since it was `listed` with this (size, mtime_ns): a file being
    written is read on a later pass, once it holds still."""
    before = check_file(path)
    if listed is not None and listed != (before.st_size, before.st_mtime_ns):
        raise Changing
    kind = kind_of(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise Skip(f"cannot be read: {e.strerror or e}") from e
    after = path.stat()
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or len(
        data
    ) != before.st_size:
        raise Changing
    if kind == "pdf":
        sections = _pdf_pages(data)
    elif kind == "docx":
        sections = (Section(_docx_text(data)),)
    else:
        if b"\0" in data[:SNIFF_BYTES]:
            raise Skip("a binary file, not text")
        text = data.decode("utf-8", errors="replace")
        if kind == "html":
            text = html_text(text)
        sections = (Section(text),)
    if not any(s.text.strip() for s in sections):
        raise Skip("has no text" + (" (a scanned PDF has only images)" if kind == "pdf" else ""))
    return Document(kind, tuple(sections), before.st_size, before.st_mtime_ns)


def _pdf_pages(data: bytes) -> tuple[Section, ...]:
    import io
    import logging

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings on odd files are noise
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Skip("an encrypted PDF (it needs a password)")
        return tuple(
            Section(page.extract_text() or "", page=i + 1) for i, page in enumerate(reader.pages)
        )
    except Skip:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise Skip(f"not a readable PDF ({type(e).__name__}: {e})") from e
    except Exception as e:  # pypdf raises more kinds on broken files than it documents
        if "crypt" in str(e).lower():
            raise Skip("an encrypted PDF that cannot be opened") from e
        raise Skip(f"not a readable PDF ({type(e).__name__}: {e})") from e


def _docx_text(data: bytes) -> str:
    """Paragraphs, with headings as Markdown headings so chunks keep them, and table rows."""
    import io
    import zipfile

    import docx

    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise Skip(f"not a readable DOCX file ({type(e).__name__})") from e
    lines = []
    for paragraph in document.paragraphs:
        style = (paragraph.style.name if paragraph.style is not None else "") or ""
        level = style.removeprefix("Heading ").strip()
        if style.startswith("Heading ") and level.isdigit():
            lines.append("#" * min(int(level), 6) + " " + paragraph.text)
        else:
            lines.append(paragraph.text)
        lines.append("")
    for table in document.tables:
        for row in table.rows:
            lines.append(" | ".join(cell.text for cell in row.cells))
        lines.append("")
    return "\n".join(lines)


class _HtmlText(HTMLParser):
    SKIP = {"script", "style", "noscript", "template", "svg"}
    BLOCK = {"p", "div", "br", "li", "tr", "section", "article", "pre", "table", "ul", "ol"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif (len(tag) == 2 and tag[0] == "h" and tag[1] in "123456") or tag in self.BLOCK:
            self.parts.append("\n\n" if tag != "br" else "\n")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    """The visible text of an HTML page, with its headings as Markdown headings."""
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)
