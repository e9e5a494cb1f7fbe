"""Reading and chunking documents, and the walk of a collection's folders (real files, real
parsers: pypdf, python-docx)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from document_helpers import encrypted_pdf, pdf_bytes

from deskllm.documents.chunking import CHUNK_TOKENS, TOKEN, chunk_document, chunk_section
from deskllm.documents.indexer import scan_folders
from deskllm.documents.readers import Section, Skip, html_text, read_document
from deskllm.documents.search import fuse
from deskllm.documents.store import fts_query


def test_a_pdf_is_read_page_by_page_and_its_chunks_keep_their_page(tmp_path: Path) -> None:
    path = tmp_path / "manual.pdf"
    path.write_bytes(pdf_bytes(["The pump runs at forty litres a minute.",
                                "Clean the filter every spring."]))  # fmt: skip
    document = read_document(path)
    assert document.kind == "pdf"
    assert [s.page for s in document.sections] == [1, 2]
    chunks = chunk_document(document.kind, document.sections)
    assert [(c.page, c.text) for c in chunks] == [
        (1, "The pump runs at forty litres a minute."), (2, "Clean the filter every spring.")]


def test_an_encrypted_or_malformed_pdf_is_skipped_with_its_reason(tmp_path: Path) -> None:
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypted_pdf())
    with pytest.raises(Skip, match="encrypted PDF"):
        read_document(locked)
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\ngarbage")
    with pytest.raises(Skip, match="PDF"):
        read_document(broken)


def test_docx_headings_become_the_chunks_headings(tmp_path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Garden", level=1)
    document.add_heading("Watering", level=2)
    document.add_paragraph("Water the tomatoes at dawn.")
    path = tmp_path / "garden.docx"
    document.save(str(path))
    read = read_document(path)
    chunks = chunk_document(read.kind, read.sections)
    assert chunks[-1].heading == "Garden › Watering"
    assert "Water the tomatoes at dawn." in chunks[-1].text
    (tmp_path / "fake.docx").write_bytes(b"not a zip at all")
    with pytest.raises(Skip, match="DOCX"):
        read_document(tmp_path / "fake.docx")


def test_html_keeps_visible_text_and_headings_only() -> None:
    text = html_text("<html><head><style>p{color:red}</style><script>var x=1</script></head>"
                     "<body><h2>Prices</h2><p>Tea costs &pound;3.</p></body></html>")  # fmt: skip
    assert "## Prices" in text and "Tea costs £3." in text
    assert "color" not in text and "var x" not in text


def test_bad_files_are_skipped_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)  # opening it for reading would block for ever
    with pytest.raises(Skip, match="not a regular file"):
        read_document(fifo)
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as f:
        f.truncate(2 * 1024**3)  # 2 GB, sparse
    with pytest.raises(Skip, match=r"too large \(2\.0 GB"):
        read_document(huge)
    binary = tmp_path / "data.txt"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(Skip, match="binary"):
        read_document(binary)
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    with pytest.raises(Skip, match=r"\.png"):
        read_document(tmp_path / "photo.png")
    (tmp_path / "empty.md").write_text("   \n")
    with pytest.raises(Skip, match="no text"):
        read_document(tmp_path / "empty.md")


def test_chunks_hold_at_most_the_token_budget_overlap_and_cover_the_text() -> None:
    words = " ".join(f"word{i}" for i in range(1000))
    chunks = chunk_section(Section(words), markdown=False)
    assert all(len(TOKEN.findall(c.text)) <= CHUNK_TOKENS for c in chunks)
    assert chunks[0].start == 0 and chunks[-1].end == len(words)
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start < a.end  # overlapping: a sentence cut at a boundary is whole in one
        assert words[b.start : a.end].strip()


def test_a_heading_starts_a_chunk_and_code_fences_are_not_headings() -> None:
    text = ("# Guide\n\nIntro.\n\n## Build\n\n```sh\n# not a heading\nmake\n```\n\n"
            "## Run\n\nStart it.\n")  # fmt: skip
    chunks = chunk_section(Section(text))
    assert [c.heading for c in chunks] == ["Guide", "Guide › Build", "Guide › Run"]
    assert "# not a heading" in chunks[1].text
    assert all(text[c.start : c.end] == c.text for c in chunks)


def test_scan_lists_symlink_loops_and_walks_a_linked_folder_once(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("alpha")
    (root / "again").symlink_to(root / "sub")  # the same folder through a link: read once
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    found = scan_folders([root])
    assert len([p for p in found.files if p.endswith("a.md")]) == 1
    assert found.skipped[str(root / "loop1")] == "a symbolic link loop"
    assert not any(".git" in p for p in found.files)


def test_fusion_prefers_what_both_lists_found_and_queries_cannot_be_syntax_errors() -> None:
    assert [item for item, _ in fuse([[1, 2, 3], [3, 4, 1]])][:2] == [1, 3]
    assert fts_query('what is "NEAR(x" OR -y*') == '"near" OR "x" OR "y"'
    assert fts_query("what is the") is None
