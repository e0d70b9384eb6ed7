"""kopf's state under state.jsoperator.io/: the users' jsoperator.io/ annotations are part of the essence
(so changing one is a change to kopf), and objects with the old state keys are read and cleaned."""

from __future__ import annotations

import json

import kopf

from jsoperator import state_storage

RESET = "jsoperator.io/reset-to-sequence"
SPEC = {"streamName": "ORDERS"}


def body(annotations: dict[str, str]) -> kopf.Body:
    return kopf.Body({"apiVersion": "jsoperator.io/v1alpha1", "kind": "Consumer",
                      "metadata": {"name": "new", "namespace": "ns", "annotations": annotations}, "spec": SPEC})


def essence_annotations(storage: kopf.DiffBaseStorage, annotations: dict[str, str]) -> dict[str, str]:
    return storage.build(body=body(annotations)).get("metadata", {}).get("annotations", {})


def test_users_annotations_are_in_the_essence_next_to_kopfs_state():
    storage = state_storage.DiffBaseStorage()
    got = essence_annotations(storage, {RESET: "3", "state.jsoperator.io/kopf-managed": "yes",
                                        "state.jsoperator.io/last-handled-configuration": "{}"})
    assert got == {RESET: "3"}


def test_the_old_prefix_hid_them_and_old_state_keys_no_longer_do():
    old_keys = {"jsoperator.io/kopf-managed": "yes", "jsoperator.io/last-handled-configuration": "{}"}
    old = kopf.AnnotationsDiffBaseStorage(prefix="jsoperator.io")
    assert essence_annotations(old, {RESET: "3", **old_keys}) == {}  # the bug: a reset was no change
    assert essence_annotations(state_storage.DiffBaseStorage(), {RESET: "3", **old_keys}) == {RESET: "3"}


def test_the_old_diffbase_is_read_when_there_is_no_new_one():
    storage = state_storage.DiffBaseStorage()
    old = {"spec": SPEC}
    assert storage.fetch(body=body({"jsoperator.io/last-handled-configuration": json.dumps(old)})) == old
    new = {"spec": {"streamName": "OTHER"}}
    both = {"jsoperator.io/last-handled-configuration": json.dumps(old),
            "state.jsoperator.io/last-handled-configuration": json.dumps(new)}
    assert storage.fetch(body=body(both)) == new
    assert storage.fetch(body=body({})) is None


def test_storing_writes_the_new_keys_and_removes_the_old_ones():
    storage = state_storage.DiffBaseStorage()
    b = body({RESET: "3", "jsoperator.io/kopf-managed": "yes", "jsoperator.io/last-handled-configuration": "{}",
              "jsoperator.io/update": "{}", "jsoperator.io/managed": "true"})
    patch = kopf.Patch()
    storage.store(body=b, patch=patch, essence=storage.build(body=b))
    written = dict(patch["metadata"]["annotations"])
    assert json.loads(written.pop("state.jsoperator.io/last-handled-configuration"))["metadata"]["annotations"] == {
        RESET: "3", "jsoperator.io/managed": "true"}
    assert written == {"state.jsoperator.io/kopf-managed": "yes", "jsoperator.io/kopf-managed": None,
                       "jsoperator.io/last-handled-configuration": None, "jsoperator.io/update": None}
