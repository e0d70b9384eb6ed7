"""The chart's broker accounts (broker.accounts, noAuthUser, configSecret) through Helm's own engine: the
two-accounts example's values render a configuration that nats-server 2.15.1 and jsbroker both accept,
with each password only an environment reference to its Secret; bad values are refused at render time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jsbroker.config import load_file
from tests.chart.go_tools import KUBE_VERSION
from tests.chart.test_chart import CHART, ROOT, env, helm_bin, one, render, run_helm  # noqa: F401 (fixture)
from tests.servers import nats_server_binary

EXAMPLE_VALUES = ROOT / "deploy" / "examples" / "two-accounts" / "values.yaml"


def _conf(docs: list, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The rendered configuration as a file (the store under tmp_path) and the broker's password variables."""
    text = one(docs, "ConfigMap")["data"]["jsbroker.conf"].replace('"/data', f'"{tmp_path}')
    path = tmp_path / "jsbroker.conf"
    path.write_text(text)
    variables = {name: f"pw-{name}" for name in env(one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0])
                 if name.startswith("JSBROKER_PASSWORD_")}
    return path, variables


def test_the_example_accounts_render_a_configuration_both_servers_accept(helm_bin, tmp_path):
    docs = render(helm_bin, [], "-f", str(EXAMPLE_VALUES))
    path, variables = _conf(docs, tmp_path)
    text = path.read_text()
    assert "pw-" not in text and len(variables) == 3
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    refs = {env(pod)[name]["secretKeyRef"]["name"] for name in variables}
    assert refs == {"team-a-nats", "team-b-nats", "ops-nats"}
    checked = subprocess.run([nats_server_binary(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=30,
                             env=variables)
    assert checked.returncode == 0, checked.stderr + checked.stdout
    cfg = load_file(path, env=variables)
    accounts = {a.name: a for a in cfg.auth.accounts}
    assert set(accounts) == {"team-a", "team-b", "ops"}
    assert accounts["team-a"].jetstream is not None and accounts["team-a"].jetstream.max_file == 1 << 30
    assert accounts["team-b"].jetstream is not None and accounts["team-b"].jetstream.max_streams == 5
    assert accounts["ops"].jetstream is None
    assert {u.user: (u.password, u.account) for u in cfg.auth.users}["team-b"] == (
        variables[next(n for n in variables if env(pod)[n]["secretKeyRef"]["name"] == "team-b-nats")], "team-b")
    assert cfg.auth.no_auth_user == "ops"


def test_a_config_secret_is_mounted_and_included(helm_bin):
    docs = render(helm_bin, ["broker.auth.enabled=false", "broker.configSecret.name=my-accounts"])
    assert 'include "include/accounts.conf"' in one(docs, "ConfigMap")["data"]["jsbroker.conf"]
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert {"name": "config-secret", "secret": {"secretName": "my-accounts"}} in pod["volumes"]
    assert {"name": "config-secret", "mountPath": "/etc/jsbroker/include", "readOnly": True} in \
        pod["containers"][0]["volumeMounts"]


@pytest.mark.parametrize(("values", "message"), [
    (["broker.accounts.a.users[0].nkey=" + "U" + "A" * 55], "need broker.auth.enabled=false"),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].user=u"], "broker.accounts.a.users[0]: needs user and "
                                                                          "passwordSecret"),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].user=u", "broker.accounts.a.users[0].nkey=U" + "A" * 55],
     "give either nkey or user with passwordSecret"),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].nkey=SUAA"], "at '/broker/accounts/a/users/0/nkey'"),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].nkey=U" + "A" * 55,
      "broker.accounts.b.users[0].nkey=U" + "A" * 55], "is already a user of account a"),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].nkey=U" + "A" * 55, "broker.noAuthUser=bob"],
     'broker.noAuthUser: "bob" is not a user of broker.accounts'),
    (["broker.auth.enabled=false", "broker.accounts.a.jetstream.maxStorage=lots"],
     "at '/broker/accounts/a/jetstream/maxStorage'"),
    (["broker.auth.enabled=false", "broker.accounts.a.jetstream.maxStreams=many"],
     "at '/broker/accounts/a/jetstream/maxStreams'"),
    (["broker.auth.enabled=false", "broker.accounts.a.limits.x=1"], "additional properties 'limits' not allowed"),
])
def test_bad_accounts_are_refused_at_render_time(helm_bin, values, message):
    args = ["template", "jk", str(CHART), "--kube-version", KUBE_VERSION]
    for value in values:
        args += ["--set", value]
    done = run_helm(helm_bin, *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
