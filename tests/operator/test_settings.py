"""Operator settings: CLI flags over JSOPERATOR_* environment over defaults; clear errors; kopf wiring."""

from __future__ import annotations

import subprocess
import sys

import kopf
import pytest

from jsoperator import handlers, settings


def test_defaults_without_flags_or_env():
    s = settings.load({}, environ={})
    assert s.servers == ("nats://127.0.0.1:4222",)
    assert s.namespaces == ()
    assert s.drift_interval == 60.0
    assert (s.metrics_port, s.health_port) == (8080, 8081)
    assert s.finalizers is True


def test_status_interval_default_off_and_bounds():
    assert settings.load({}, environ={}).status_interval == 2.0
    assert settings.load({}, environ={"JSOPERATOR_STATUS_INTERVAL": "0"}).status_interval is None
    with pytest.raises(settings.SettingsError, match="--status-interval must be >= 0 seconds"):
        settings.load({"status_interval": -1.0}, environ={})


def test_leader_election_names_a_lease():
    assert settings.load({}, environ={"JSOPERATOR_LEADER_ELECTION": "ops/jsop"}).leader_election == "ops/jsop"
    with pytest.raises(settings.SettingsError, match="--leader-election takes NAMESPACE/NAME of a Lease"):
        settings.load({"leader_election": "jsop"}, environ={})


def test_finalizers_off_by_flag_or_env():
    assert settings.load({"finalizers": False}, environ={}).finalizers is False
    assert settings.load({}, environ={"JSOPERATOR_FINALIZERS": "False"}).finalizers is False
    with pytest.raises(settings.SettingsError, match="JSOPERATOR_FINALIZERS='no' is invalid: write true or false"):
        settings.load({}, environ={"JSOPERATOR_FINALIZERS": "no"})


def test_env_then_flags_precedence():
    env = {"JSOPERATOR_SERVERS": "nats://a:4222, nats://b:4222", "JSOPERATOR_DRIFT_INTERVAL": "5",
           "JSOPERATOR_NAMESPACES": "x,y", "JSOPERATOR_METRICS_PORT": "0"}
    s = settings.load({}, environ=env)
    assert s.servers == ("nats://a:4222", "nats://b:4222")
    assert s.drift_interval == 5.0
    assert s.namespaces == ("x", "y")
    assert s.metrics_port is None  # 0 disables the endpoint
    s = settings.load({"servers": ("nats://c:1",), "drift_interval": 2.5, "namespaces": ("z",)}, environ=env)
    assert (s.servers, s.drift_interval, s.namespaces) == (("nats://c:1",), 2.5, ("z",))


@pytest.mark.parametrize(
    "flags, env, message",
    [
        ({"drift_interval": 0.0}, {}, "--drift-interval must be > 0"),
        ({}, {"JSOPERATOR_DRIFT_INTERVAL": "soon"}, "JSOPERATOR_DRIFT_INTERVAL='soon' is invalid"),
        ({"log_level": "LOUD"}, {}, "is not a logging level"),
        ({"creds_file": "a.creds", "creds_secret": "ns/s"}, {}, "either --creds or --creds-secret"),
        ({"tls_cert_file": "c.pem"}, {}, "--tls-cert and --tls-key go together"),
        ({"instance": "Team_A"}, {}, "--instance 'Team_A' must be 1-40 lowercase letters"),
        ({}, {"JSOPERATOR_INSTANCE": "-a"}, "--instance '-a' must be"),
    ],
)
def test_invalid_settings_say_what_to_fix(flags, env, message):
    with pytest.raises(settings.SettingsError, match=message):
        settings.load(flags, environ=env)


def test_kopf_state_lives_under_its_own_prefix_not_the_users_annotations():
    ks = handlers.kopf_settings(settings.load({}, environ={}))
    assert ks.persistence.finalizer == "jsoperator.io/finalizer"
    assert isinstance(ks.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert ks.persistence.progress_storage.prefix == "state.jsoperator.io"
    assert isinstance(ks.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert ks.persistence.diffbase_storage.prefix == "state.jsoperator.io"


def test_each_instance_has_its_own_finalizer():
    """kopf takes its finalizer off every object of a watched kind its handlers do not match: two operators
    sharing a finalizer name would take each other's off."""
    assert handlers.kopf_settings(settings.load({"instance": "east"}, environ={})).persistence.finalizer == (
        "jsoperator.io/finalizer.east")
    assert settings.load({}, environ={"JSOPERATOR_INSTANCE": "team-b"}).finalizer == "jsoperator.io/finalizer.team-b"


def test_cli_rejects_bad_settings_with_exit_code_2():
    proc = subprocess.run(
        [sys.executable, "-m", "jsoperator", "run", "--drift-interval", "-1"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "--drift-interval must be > 0" in proc.stderr


def test_crds_command_prints_every_definition():
    import yaml

    proc = subprocess.run([sys.executable, "-m", "jsoperator", "crds"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    names = sorted(doc["metadata"]["name"] for doc in yaml.safe_load_all(proc.stdout) if doc)
    assert names == ["clusterjetstreamconnections.jsoperator.io", "consumers.jsoperator.io",
                     "jetstreamconnections.jsoperator.io", "keyvalues.jsoperator.io", "objectstores.jsoperator.io",
                     "streams.jsoperator.io"]
