"""Shop search (BM25 configured like WebShop's Lucene index), title nouns, and env construction."""

import importlib.util
import math

import pytest

from proas.envs.base import SUCCESS_REWARD
from proas.envs.shop import make_shop_env
from proas.envs.shop.nouns import TitleNouns, heuristic_nouns
from proas.envs.shop.search import K1, Analyzer, B, SearchIndex, document_text
from proas.errors import ProasError


def prod(title, desc="", bullets=("",), options=None):
    return {"Title": title, "Description": desc, "BulletPoints": list(bullets), "options": options or {}}


def test_analyzer_lucene_like():
    a = Analyzer()
    # stop words dropped, possessive removed, Porter stems, decimals and one-char tokens kept
    assert a("The Women's Running Shoes, size 7 and 6.5 x-large") == [
        "women",
        "run",
        "shoe",
        "size",
        "7",
        "6.5",
        "x",
        "larg",
    ]


def test_tokens_follow_unicode_word_breaks():
    a = Analyzer()
    assert a("L'eau d'Issey's 1,299.00 u.s.a t-shirt b2 a.5") == [
        "l'eau",
        "d'issei",
        "1,299.00",
        "u.s.a",
        "t",
        "shirt",
        "b2",
        "5",
    ]  # 'a' is a stop word


def test_document_text_is_webshops_indexed_text():
    p = prod("Red Shirt", "Soft.", ["First bullet", "Second bullet"], {"color": ["red", "blue"], "size": ["s"]})
    assert document_text(p) == "red shirt soft. first bullet color: red, blue, and size: s"


def test_scores_follow_lucene_bm25():
    docs = [prod("red shirt"), prod("red red shirt with long sleeves"), prod("blue jeans"), prod("red")]
    index = SearchIndex(docs)
    tokenized = [index.analyzer(document_text(d)) for d in docs]
    avgdl = sum(map(len, tokenized)) / len(tokenized)

    def lucene(query):
        out = []
        for toks in tokenized:
            s = 0.0
            for q in index.analyzer(query):
                df = sum(q in t for t in tokenized)
                tf = toks.count(q)
                if tf:
                    idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                    s += idf * tf / (tf + K1 * (1 - B + B * len(toks) / avgdl))
            out.append(s)
        return out

    for query in ("red shirt", "red", "jeans sleeves", "red red"):
        expected = lucene(query)
        got = index._bm25.get_scores_from_ids([index.vocab[t] for t in index.analyzer(query)])
        assert list(got) == pytest.approx(expected, rel=1e-5)
        ranked = sorted((i for i, s in enumerate(expected) if s > 0), key=lambda i: (-expected[i], i))
        assert index.search(query) == ranked


def test_no_hit_and_top_50_cap():
    index = SearchIndex([prod(f"shirt number{i}") for i in range(60)])
    assert index.search("zebra") == []
    assert index.search("the of and") == []
    hits = index.search("shirt")
    assert len(hits) == 50 and hits == list(range(50))  # equal scores keep document order


def test_heuristic_nouns():
    assert heuristic_nouns("Acme Premium Wireless Earbuds, 2 Pack") == ["acme", "earbuds", "pack"]


def test_stored_nouns_then_heuristic():
    nouns = TitleNouns("stored", {"Acme Red Shirt": ["Acme", "shirt"]})
    assert nouns("Acme Red Shirt") == ["acme", "shirt"]
    assert nouns("Zeta Blue Hoodie") == ["zeta", "hoodie"]
    assert nouns.source == "stored"


def test_spacy_source_requires_the_model(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "en_core_web_sm" else real(name, *a)
    )
    with pytest.raises(ProasError, match="en_core_web_sm"):
        TitleNouns("spacy")
    assert TitleNouns("auto").source == "stored"
    with pytest.raises(ProasError, match="unknown title-noun source"):
        TitleNouns("wordnet")


def test_missing_data_file_is_a_clear_error(tmp_path):
    with pytest.raises(ProasError, match="not found"):
        make_shop_env(items=tmp_path / "items.json")


def test_human_goal_mode_on_the_shipped_catalog():
    env = make_shop_env(human_goals=True, nouns="stored")
    assert len(env.catalog.goals) == 1200
    goal = env.goal("0")
    assert isinstance(goal["goal_options"], list) and goal["weight"] == 1
    plan = env.oracle("0")
    env.reset("0")
    for a in plan:
        _, reward, terminated, truncated, info = env.step(a)
        done = terminated or truncated
    assert done and info["won"] and reward == SUCCESS_REWARD
