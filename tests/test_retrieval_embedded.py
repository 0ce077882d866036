"""Embedded BM25 backend: versioned indexes, the live alias, literal queries, fair ties, known-answer ranking."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from components.config import EmbeddedConfig
from components.data.schema import Passage
from components.retrieval.base import SearchBackend, SearchError, corpus_hash
from components.retrieval.embedded import EmbeddedBackend, top_k_fair

CAPITALS = [
    Passage("fr", "France", "Paris is the capital and largest city of France."),
    Passage("de", "Germany", "Berlin is the capital of Germany and its most populous city."),
    Passage("it", "Italy", "Rome is the capital city of Italy, founded on seven hills."),
    Passage("jp", "Japan", "Tokyo is the capital of Japan and hosts the imperial palace."),
    Passage("eg", "Egypt", "Cairo lies on the Nile and is the capital of Egypt."),
    Passage("pe", "Peru", "Lima, on the Pacific coast, is the capital of Peru."),
]


@pytest.fixture
def backend(tmp_path):
    b = EmbeddedBackend(tmp_path / "index", EmbeddedConfig(), seed=0)
    yield b
    b.close()


def test_is_a_search_backend(backend):
    assert isinstance(backend, SearchBackend)


def test_build_search_and_noop_rebuild(backend, tmp_path):
    v = backend.build("wiki", CAPITALS)
    assert v.created and v.n_docs == 6 and v.version == corpus_hash(CAPITALS)
    assert v.name == f"wiki-{v.version[:12]}"
    assert backend.live_version("wiki") == v.version
    assert (tmp_path / "index" / "wiki" / v.version / "meta.json").is_file()

    again = backend.build("wiki", list(reversed(CAPITALS)))  # same corpus, other order
    assert not again.created and again.version == v.version

    [hits] = backend.search("wiki", ["Which river flows through Cairo?"], k=3)
    assert hits[0].id == "eg" and hits[0].title == "Egypt" and "Nile" in hits[0].text
    assert all(h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_known_answers_rank_first(backend):
    backend.build("wiki", CAPITALS)
    questions = {
        "What is the capital of Japan?": "jp",
        "Which city was founded on seven hills?": "it",
        "capital on the Pacific coast": "pe",
        "most populous city of Germany": "de",
    }
    results = backend.search("wiki", list(questions), k=2)
    assert [hits[0].id for hits in results] == list(questions.values())
    assert all(len(hits) == 2 for hits in results)


def test_new_corpus_moves_alias_and_a_fresh_process_sees_it(backend, tmp_path):
    v1 = backend.build("wiki", CAPITALS)
    assert backend.search("wiki", ["Tokyo"], 1)[0][0].id == "jp"
    updated = CAPITALS[:-1] + [Passage("jp2", "Kyoto", "Kyoto was the imperial capital before Tokyo.")]
    v2 = backend.build("wiki", updated)
    assert v2.created and v2.version != v1.version
    assert backend.live_version("wiki") == v2.version
    assert (tmp_path / "index" / "wiki" / "LIVE").read_text().strip() == v2.version
    # the same instance follows the alias to the new version
    assert {h.id for h in backend.search("wiki", ["Kyoto"], 3)[0]} == {"jp2"}
    assert backend.search("wiki", ["Lima Peru"], 3) == [[]]

    fresh = EmbeddedBackend(tmp_path / "index")
    assert fresh.live_version("wiki") == v2.version
    assert fresh.search("wiki", ["Kyoto"], 1)[0][0].id == "jp2"

    # rolling back to a kept version is a pointer switch, not a rebuild
    back = backend.build("wiki", CAPITALS)
    assert not back.created and backend.live_version("wiki") == v1.version


def test_retention_prunes_old_versions_but_never_the_live_one(tmp_path):
    b = EmbeddedBackend(tmp_path, EmbeddedConfig(retention=2))
    versions = [b.build("wiki", CAPITALS[: n + 2]).version for n in range(4)]
    kept = {d.name for d in (tmp_path / "wiki").iterdir() if d.is_dir()}
    assert kept == set(versions[-2:])
    assert b.live_version("wiki") == versions[-1]


def test_changed_settings_rebuild_the_same_version(tmp_path):
    EmbeddedBackend(tmp_path, EmbeddedConfig(k1=1.2)).build("wiki", CAPITALS)
    again = EmbeddedBackend(tmp_path, EmbeddedConfig(k1=0.9)).build("wiki", CAPITALS)
    assert again.created


def test_aliases_are_independent(backend):
    backend.build("wiki", CAPITALS)
    backend.build("synthetic", [Passage("s1", "Zorblat", "Zorblat is the mentor of Quix.")])
    assert backend.search("synthetic", ["capital of France"], 3) == [[]]
    assert backend.search("synthetic", ["mentor of Quix"], 3)[0][0].id == "s1"
    assert backend.search("wiki", ["capital of France"], 1)[0][0].id == "fr"


LITERAL_QUERIES = [
    "",
    "   ",
    "*",
    "*:*",
    "?",
    "title:* OR text:*",
    "capital AND NOT (Paris OR",
    'capital~2 "unbalanced',
    "/.*/",
    "\\",
    "{!lucene}capital^100",
    "😀🔥🌍",
    "\x00\x01\x07\x1b[31m",
    "x" * 100_000,
    "capital " * 12_500,  # 100 kB of a real word
]


def test_queries_are_literal_text_and_never_raise(backend):
    backend.build("wiki", CAPITALS)
    results = backend.search("wiki", LITERAL_QUERIES, k=10)
    assert len(results) == len(LITERAL_QUERIES)
    by_query = dict(zip(LITERAL_QUERIES, results))
    for q in ["", "   ", "*", "*:*", "?", "/.*/", "\\", "😀🔥🌍", "\x00\x01\x07\x1b[31m", "x" * 100_000]:
        assert by_query[q] == [], f"{q[:30]!r} matched {by_query[q]}"
    # syntax characters are ignored: only passages with the literal words match
    assert {h.id for h in by_query["capital AND NOT (Paris OR"]} == {p.id for p in CAPITALS}
    assert by_query["title:* OR text:*"] == []  # 'title', 'text', 'or' are words no passage contains
    assert by_query["capital " * 12_500][0].score > 0


def test_bad_inputs_name_the_problem(backend, tmp_path):
    with pytest.raises(ValueError, match="duplicate passage id 'fr'"):
        backend.build("wiki", CAPITALS + [Passage("fr", "x", "y")])
    with pytest.raises(ValueError, match="no passages"):
        backend.build("wiki", [])
    with pytest.raises(ValueError, match="alias"):
        backend.build("../escape", CAPITALS)
    with pytest.raises(SearchError, match="'missing'.*no live version"):
        backend.search("missing", ["q"], 3)
    backend.build("wiki", CAPITALS)
    with pytest.raises(ValueError, match="k must be"):
        backend.search("wiki", ["q"], 0)
    (tmp_path / "index" / "wiki" / "LIVE").write_text("garbage")
    with pytest.raises(SearchError, match="LIVE: not a corpus hash"):
        backend.search("wiki", ["q"], 3)


# --- fair ties -----------------------------------------------------------------------------------

TIED = [Passage(f"t{i:02d}", "Same", f"alpha beta gamma{i}") for i in range(8)] + [
    Passage("other", "Other", "delta epsilon zeta")
]


def test_ties_are_broken_uniformly_not_by_id(tmp_path):
    b = EmbeddedBackend(tmp_path, seed=123)
    b.build("wiki", TIED)
    calls = 4000
    first = Counter()
    for _ in range(calls // 100):
        for hits in b.search("wiki", ["alpha"] * 100, k=1):
            first[hits[0].id] += 1
    assert set(first) == {f"t{i:02d}" for i in range(8)}
    expected = calls / 8
    chi2 = sum((c - expected) ** 2 / expected for c in first.values())
    assert chi2 < 24.3, (chi2, first)  # 7 d.o.f., p = 0.001
    # the top-k set of tied passages is also drawn fairly: each appears in about k/n of the lists
    appear = Counter(h.id for hits in b.search("wiki", ["alpha"] * 2000, k=3) for h in hits)
    assert all(abs(c / 2000 - 3 / 8) < 0.06 for c in appear.values()), appear


def test_tie_order_is_seeded_and_can_be_passed_in(tmp_path):
    a = EmbeddedBackend(tmp_path, seed=7)
    a.build("wiki", TIED)
    b = EmbeddedBackend(tmp_path, seed=7)
    run_a = [[h.id for h in hits] for hits in a.search("wiki", ["alpha"] * 20, k=8)]
    run_b = [[h.id for h in hits] for hits in b.search("wiki", ["alpha"] * 20, k=8)]
    assert run_a == run_b
    assert len({tuple(r) for r in run_a}) > 1  # the order varies between queries and calls
    x = a.search("wiki", ["alpha"], 8, rng=np.random.default_rng(5))
    y = b.search("wiki", ["alpha"], 8, rng=np.random.default_rng(5))
    assert x == y


def test_top_k_fair_keeps_strict_order_and_samples_the_boundary_tie():
    scores = np.array([3.0, 2.0, 2.0, 2.0, 1.0, 0.0], dtype=np.float32)
    rng = np.random.default_rng(0)
    seconds = Counter()
    for _ in range(3000):
        top = top_k_fair(scores, 2, rng)
        assert top[0] == 0 and top[1] in (1, 2, 3)
        seconds[int(top[1])] += 1
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in seconds.values()), seconds
    assert list(top_k_fair(scores, 10, rng))[-1] == 4  # zero scores never returned
    assert top_k_fair(np.zeros(4, dtype=np.float32), 3, rng).size == 0


# --- a killed build -------------------------------------------------------------------------------

KILLED_BUILD = """
import os, signal, sys
from pathlib import Path
from components.data.schema import Passage
from components.retrieval import embedded

def die(self, out, *args):
    out.mkdir()
    (out / "half").write_text("x")
    os.kill(os.getpid(), signal.SIGKILL)  # kill -9 while the new version is half written
embedded.EmbeddedBackend._write_version = die
embedded.EmbeddedBackend(Path(sys.argv[1])).build("wiki", [Passage("n1", "New", "a new corpus")])
"""


def test_a_killed_build_leaves_the_old_version_live_and_its_temps_are_removed_by_the_next(tmp_path, repo_root):
    import os
    import subprocess
    import sys

    b = EmbeddedBackend(tmp_path)
    old = b.build("wiki", CAPITALS).version
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", KILLED_BUILD, str(tmp_path)], env=env, timeout=120)
        assert proc.returncode == -9
    leftovers = [p.name for p in (tmp_path / "wiki").iterdir() if p.name.startswith(".") and p.name != ".lock"]
    assert len(leftovers) == 1  # .<hash>.<random>: the second build removed the first one's, left its own
    assert b.live_version("wiki") == old and b.search("wiki", ["Paris"], 1)  # the old version still serves

    new = [Passage("n1", "New", "a new corpus")]
    v = b.build("wiki", new)
    assert [p.name for p in (tmp_path / "wiki").iterdir() if p.name.startswith(".") and p.name != ".lock"] == []
    assert b.live_version("wiki") == v.version == corpus_hash(new)
    assert b.search("wiki", ["corpus"], 1)[0][0].id == "n1"


KILLED_PRUNE = """
import os, shutil, signal, sys
from pathlib import Path
from components.data.schema import Passage
from components.retrieval import embedded
from components.config import EmbeddedConfig

real_rmtree = shutil.rmtree
def rmtree(path, *args, **kwargs):
    victim = Path(path) / "data.csc.index.npy"
    if not victim.is_file():  # not an index version (atomic_path's temps): as usual
        return real_rmtree(path, *args, **kwargs)
    victim.unlink()  # one file of the old version gone, then kill -9
    os.kill(os.getpid(), signal.SIGKILL)
embedded.shutil.rmtree = rmtree
embedded.EmbeddedBackend(Path(sys.argv[1]), EmbeddedConfig(retention=1)).build("wiki", [Passage("n1", "New", "a new corpus")])
"""


def test_a_build_killed_while_pruning_never_leaves_a_half_version_to_reuse(tmp_path, repo_root):
    """kill -9 in the middle of deleting an old version; rebuilding that old corpus later (a rollback) must give a
    whole, searchable index, not reuse the half-deleted one."""
    import os
    import subprocess
    import sys

    b = EmbeddedBackend(tmp_path, EmbeddedConfig(retention=1))
    old = b.build("wiki", CAPITALS).version
    assert (tmp_path / "wiki" / old / "data.csc.index.npy").is_file()
    proc = subprocess.run([sys.executable, "-c", KILLED_PRUNE, str(tmp_path)], timeout=120,
                          env={**os.environ, "PYTHONPATH": str(repo_root)})  # fmt: skip
    assert proc.returncode == -9
    fresh = EmbeddedBackend(tmp_path, EmbeddedConfig(retention=1))
    assert fresh.build("wiki", CAPITALS).version == old and fresh.live_version("wiki") == old
    assert fresh.search("wiki", ["Paris"], 1)[0][0].id == "fr"
    assert [p.name for p in (tmp_path / "wiki").iterdir() if p.name.startswith(".") and p.name != ".lock"] == []


BUILD = """
import sys
from pathlib import Path
from components.config import parse_config
from components.data.schema import Passage
from components.data.synthetic import generate_world
from components.retrieval.embedded import EmbeddedBackend
cfg = parse_config({})
passages = [Passage(p.id, p.title, p.text, "synthetic") for p in generate_world(cfg.data.synthetic).passages()]
EmbeddedBackend(Path(sys.argv[1]), cfg.retrieval.embedded).build("synthetic", passages)
"""


def test_the_same_corpus_gives_the_same_index_bytes_in_every_process(tmp_path, repo_root):
    import filecmp
    import os
    import subprocess
    import sys

    for seed in ("1", "2"):  # str hashing, and so set order, differs between the two processes
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", BUILD, str(tmp_path / seed)], cwd=repo_root, env=env, check=True,
                       capture_output=True, timeout=120)  # fmt: skip
    files = sorted(p.relative_to(tmp_path / "1") for p in (tmp_path / "1").rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "2") for p in (tmp_path / "2").rglob("*") if p.is_file())
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "1", tmp_path / "2", [str(f) for f in files], shallow=False)
    assert not mismatch and not errors, mismatch + errors
