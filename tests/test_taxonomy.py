"""Taxonomy YAML: validation names file, scope and field; membership; fingerprint."""

import pytest
from conftest import TAXONOMY_YAML

from masdr_router import Taxonomy, UnknownScopeError, ValidationError


def test_loads_scopes_in_order(write):
    t = Taxonomy.from_yaml(write("t.yaml", TAXONOMY_YAML))
    assert t.names == ["sport", "tech", "all-news"]
    assert t["tech"].match == {"category": ("tech", "science")}


def test_a_chunk_belongs_to_every_scope_it_matches(write):
    t = Taxonomy.from_yaml(write("t.yaml", TAXONOMY_YAML))
    assert t.scopes_of({"category": "science", "source": "news"}) == ["tech", "all-news"]
    assert t.scopes_of({"category": "sport"}) == ["sport"]
    assert t.scopes_of({"category": "weather"}) == []


def test_every_match_key_must_match():
    t = Taxonomy.from_dict({"name": "t", "scopes": [
        {"name": "a", "description": "A", "match": {"source": "bbc", "category": "tech"}}]})
    assert t.scopes_of({"source": "bbc", "category": "tech"}) == ["a"]
    assert t.scopes_of({"source": "20ng", "category": "tech"}) == []


@pytest.mark.parametrize("yaml_text, message", [
    ("name: t\nscopes:\n  - name: Bad Name\n    description: x\n    match: {a: 1}\n",
     r"t\.yaml: field 'scopes\[0\]\.name': must match \[a-z0-9\]\[a-z0-9_-\]\*, got 'Bad Name'"),
    ("name: t\nscopes:\n  - name: a\n    description: x\n    match: {a: 1}\n"
     "  - name: a\n    description: y\n    match: {a: 2}\n",
     r"field 'scopes\[1\]\.name': duplicate scope name 'a'"),
    ("name: t\nscopes:\n  - name: a\n    match: {a: 1}\n",
     r"field 'scopes\[0\] \('a'\)\.description': must be a non-empty string"),
    ("name: t\nscopes:\n  - name: a\n    description: x\n",
     r"field 'scopes\[0\] \('a'\)\.match': must be a non-empty mapping"),
    ("name: t\nscopes:\n  - name: a\n    description: x\n    match: {a: 1}\n    patterns: ['(unclosed']\n",
     r"field 'scopes\[0\] \('a'\)\.patterns\[0\]': invalid regex '\(unclosed'"),
    ("name: t\nscopes:\n  - name: a\n    description: x\n    match: {a: 1}\n    colour: red\n",
     r"unknown key\(s\) \['colour'\]"),
    ("name: t\nscopes: []\n", r"field 'scopes': must be a non-empty list"),
    ("name: t\nscopes:\n  - name: a\n    description: [unclosed\n", r"t\.yaml:\d+: invalid YAML"),
])
def test_broken_taxonomies_are_reported_with_file_and_field(write, yaml_text, message):
    with pytest.raises(ValidationError, match=message):
        Taxonomy.from_yaml(write("t.yaml", yaml_text))


def test_missing_file_is_a_validation_error(tmp_path):
    with pytest.raises(ValidationError, match="taxonomy file not found"):
        Taxonomy.from_yaml(tmp_path / "nope.yaml")


def test_unknown_scope_lists_the_known_ones(write):
    t = Taxonomy.from_yaml(write("t.yaml", TAXONOMY_YAML))
    with pytest.raises(UnknownScopeError, match="unknown scope 'weather'; taxonomy 'tiny' has: sport, tech, all-news"):
        t.check_scope("weather")


def test_fingerprint_covers_names_and_match_but_not_hints(write):
    base = Taxonomy.from_yaml(write("a.yaml", TAXONOMY_YAML))
    reworded = Taxonomy.from_yaml(write("b.yaml", TAXONOMY_YAML.replace("Computers and phones.", "Gadgets.")))
    rematched = Taxonomy.from_yaml(write("c.yaml", TAXONOMY_YAML.replace("[tech, science]", "[tech]")))
    assert base.fingerprint == reworded.fingerprint
    assert base.fingerprint != rematched.fingerprint
    assert base.fingerprint.startswith("sha256:") and len(base.fingerprint) == 7 + 16


def test_yaml_round_trip_keeps_the_fingerprint(write, tmp_path):
    t = Taxonomy.from_yaml(write("t.yaml", TAXONOMY_YAML))
    t.to_yaml(tmp_path / "again.yaml")
    again = Taxonomy.from_yaml(tmp_path / "again.yaml")
    assert again == t and again.fingerprint == t.fingerprint


def test_a_file_edited_on_disk_is_read_again_not_served_from_a_cache(write):
    """A service reloads its keys and taxonomies from disk: the second read must see the edit."""
    path = write("t.yaml", TAXONOMY_YAML)
    assert Taxonomy.from_yaml(path).names == ["sport", "tech", "all-news"]
    path.write_text(TAXONOMY_YAML.replace("sport", "athletics"), encoding="utf-8")
    assert Taxonomy.from_yaml(path).names == ["athletics", "tech", "all-news"]
