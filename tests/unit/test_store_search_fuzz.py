"""Property-based search strings: whatever the user types or pastes into the sidebar's search
(FTS5 syntax, quotes, NUL, lone surrogates, huge strings, any unicode), the store's search
returns a list or raises its own SearchError, quickly, and changes nothing."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deskllm.database.connection import open_database
from deskllm.store.conversations import MAX_SEARCH_CHARS, ConversationStore, SearchError

# What FTS5's query grammar and SQLite's LIKE give meaning to, mixed into the random text.
SYNTAX = ['"', "'", "*", "^", ":", "(", ")", "{", "}", "-", "+", "%", "_", "\\", "\x00",
          " AND ", " OR ", " NOT ", "NEAR(", "content:", "messages_fts:", "\n", "\t"]  # fmt: skip
SEARCH_TEXT = st.one_of(
    st.text(),  # any code point, lone surrogates and NUL included
    st.lists(st.one_of(st.sampled_from(SYNTAX), st.text(max_size=8)), max_size=40).map("".join),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=4), st.integers(1, 30_000)),
)
SECONDS_PER_SEARCH = 2.0  # generous for a loaded 2-core machine; a hang would take far longer


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = open_database(tmp_path_factory.mktemp("search") / "store.sqlite3")
    store = ConversationStore(db)
    for title, text in [
        ("Trip to Lisbon", "Which tram goes to Belém?"),
        ("Code: 100% done_now", 'x AND y; a*b "quoted" NOT work'),
        ("Ünïcödé 😀", "naïve café 日本語 \u200b zero width"),
    ]:
        store.add_message(store.create(title).id, "user", text)
    yield store
    db.close()


@settings(
    max_examples=300,
    deadline=None,  # the time bound is asserted below, per call, with a clearer message
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=SEARCH_TEXT)
@example(text="\x00")
@example(text="a\x00b")
@example(text='"\x00"')
@example(text="\ud800")
@example(text="caf\udce9")
@example(text="a" * 60_000)  # past SQLite's LIKE pattern limit (50,000 bytes)
@example(text="word " * 20_000)
def test_any_search_string_returns_a_list_or_a_search_error(store, text):
    start = time.monotonic()
    try:
        results = store.search(text)
    except SearchError as error:
        assert str(error)  # says why
    else:
        assert isinstance(results, list)
    assert time.monotonic() - start < SECONDS_PER_SEARCH
    assert store.db["messages"].count == 3 and store.db["conversations"].count == 3


def test_a_nul_is_a_word_break_not_the_end_of_the_pattern(store):
    # SQLite's LIKE stops at a NUL: "zzz\x00" would have matched every title as "%zzz%"... and
    # "\x00zzz" as "%%", i.e. everything.
    assert store.search("\x00qqq") == []
    assert [c.title for c in store.search("Trip\x00to")] == ["Trip to Lisbon"]


def test_lone_surrogates_are_searched_as_replacement_characters(store):
    assert store.search("\ud800") == []
    assert [c.title for c in store.search("Belém\udce9")] == ["Trip to Lisbon"]  # FTS word


def test_a_search_past_the_limit_is_refused_with_a_reason(store):
    with pytest.raises(SearchError, match=f"{MAX_SEARCH_CHARS:,}"):
        store.search("a" * (MAX_SEARCH_CHARS + 1))
    assert store.search("a" * MAX_SEARCH_CHARS) == []
