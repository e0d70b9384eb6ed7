"""Pure subject rules shared by the subject index, stores and JetStream config checks."""
import pytest

from jsbroker.subjects import is_literal, is_subset, is_valid_publish_subject, is_valid_subject, subject_matches, subjects_overlap


@pytest.mark.parametrize("subject,ok", [
    ("foo", True), ("foo.bar", True), ("foo.*", True), ("foo.>", True), (">", True), ("*.*", True),
    ("", False), ("foo.", False), (".foo", False), ("foo..bar", False), ("foo.>.bar", False),
    ("foo bar", False), ("foo\tbar", False), ("foo.b>", False), ("a*b", True),
])
def test_valid_subject(subject, ok):
    assert is_valid_subject(subject) is ok


def test_literal_and_publish():
    assert is_literal("a*b.c") and not is_literal("a.*") and not is_literal("a.>")
    assert is_valid_publish_subject("a.b") and not is_valid_publish_subject("a.*")


@pytest.mark.parametrize("flt,subject,ok", [
    ("foo", "foo", True), ("foo", "bar", False), ("foo.*", "foo.bar", True), ("foo.*", "foo", False),
    ("foo.*", "foo.bar.baz", False), ("foo.>", "foo", False), ("foo.>", "foo.bar.baz", True),
    (">", "anything.at.all", True), ("*.bar", "foo.bar", True), ("*.bar", "foo.baz", False),
])
def test_matches(flt, subject, ok):
    assert subject_matches(flt, subject) is ok


@pytest.mark.parametrize("a,b,ok", [
    ("foo.*", "foo.bar", True), ("foo.>", "foo.bar.baz", True), ("foo.*", "foo.bar.baz", False),
    ("foo.>", "foo", False), ("*.bar", "foo.*", True), ("a", "b", False), (">", "x", True),
    ("foo.*.baz", "foo.>", True),
])
def test_overlap(a, b, ok):
    assert subjects_overlap(a, b) is ok
    assert subjects_overlap(b, a) is ok


def test_subset():
    assert is_subset("foo.bar", "foo.*") and is_subset("foo.*", "foo.>") and is_subset("foo.>", ">")
    assert not is_subset("foo.>", "foo.*") and not is_subset("foo.*", "foo.bar") and not is_subset("foo", "foo.>")
