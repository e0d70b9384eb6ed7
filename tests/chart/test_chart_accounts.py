"""The chart's broker accounts (broker.accounts, noAuthUser, systemAccount, configSecret) through Helm's own
engine: the two-accounts example's values render a configuration that nats-server 2.15.1 and jsbroker both
accept, with each password only an environment reference to its Secret; both servers started with it answer
the system account's user on $SYS.REQ.SERVER.PING and a team's user with no responders; bad values are
refused at render time."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import nats
import pytest
from nats.errors import NoRespondersError

from jsbroker.config import load_file
from tests.chart.go_tools import KUBE_VERSION
from tests.chart.test_chart import CHART, ROOT, env, helm_bin, one, render, run_helm  # noqa: F401 (fixture)
from tests.servers import JSBROKER, KINDS, launch, nats_server_binary

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
    assert "pw-" not in text and len(variables) == 4
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    refs = {env(pod)[name]["secretKeyRef"]["name"] for name in variables}
    assert refs == {"team-a-nats", "team-b-nats", "ops-nats", "sys-nats"}
    checked = subprocess.run([nats_server_binary(), "-t", "-c", str(path)], capture_output=True, text=True, timeout=30,
                             env=variables)
    assert checked.returncode == 0, checked.stderr + checked.stdout
    cfg = load_file(path, env=variables)
    accounts = {a.name: a for a in cfg.auth.accounts}
    assert set(accounts) == {"team-a", "team-b", "ops", "sys"}
    assert cfg.auth.system_account == "sys"
    assert accounts["team-a"].jetstream is not None and accounts["team-a"].jetstream.max_file == 1 << 30
    assert accounts["team-b"].jetstream is not None and accounts["team-b"].jetstream.max_streams == 5
    assert accounts["ops"].jetstream is None
    assert {u.user: (u.password, u.account) for u in cfg.auth.users}["team-b"] == (
        variables[next(n for n in variables if env(pod)[n]["secretKeyRef"]["name"] == "team-b-nats")], "team-b")
    assert cfg.auth.no_auth_user == "ops"


def _password(docs: list, variables: dict[str, str], secret: str) -> str:
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    return next(value for name, value in variables.items() if env(pod)[name]["secretKeyRef"]["name"] == secret)


async def _ask(url: str, user: str, password: str, subject: str) -> object:
    """The answer's JSON, or "503" when nobody in the user's account serves the subject."""
    nc = await nats.connect(url, user=user, password=password, allow_reconnect=False)
    try:
        return json.loads((await nc.request(subject, b"", timeout=5)).data)
    except NoRespondersError:
        return "503"
    finally:
        await nc.close()


def test_the_system_user_of_the_example_sees_the_server_and_a_team_user_does_not(helm_bin, tmp_path, monkeypatch):
    """Both servers started with the rendered configuration (passwords in the environment, as the pod has
    them): the sys user's PING is answered by the server (its one connection counted), its USER.INFO names
    account sys; team-a's PING has no responders, its own account has no $SYS services."""
    docs = render(helm_bin, [], "-f", str(EXAMPLE_VALUES))
    got = {}
    for kind in KINDS:
        (tmp_path / kind).mkdir()
        path, variables = _conf(docs, tmp_path / kind)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        sys_pw, team_pw = _password(docs, variables, "sys-nats"), _password(docs, variables, "team-a-nats")
        # Free ports (-p, -m win over the file's); nats-server refuses -sd beside the file's store_dir, and
        # jsbroker's JetStream is on unless turned off (its -sd wins).
        with launch(kind, jetstream=kind == JSBROKER, http=True, extra_args=["-c", str(path)]) as server:
            got[kind] = [asyncio.run(_ask(server.url, user, password, subject)) for user, password, subject in (
                ("sys", sys_pw, "$SYS.REQ.SERVER.PING"), ("sys", sys_pw, "$SYS.REQ.USER.INFO"),
                ("team-a", team_pw, "$SYS.REQ.SERVER.PING"))]  # one at a time: the asker is the one connection
    for kind, (ping, info, team) in got.items():
        assert isinstance(ping, dict) and set(ping) == {"server", "statsz"}, (kind, ping)
        assert ping["statsz"]["connections"] == 1, (kind, ping)
        assert isinstance(info, dict) and (info["data"]["user"], info["data"]["account"]) == ("sys", "sys"), kind
        assert team == "503", (kind, team)


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
    (["broker.systemAccount=a"], "broker.systemAccount and broker.configSecret need broker.auth.enabled=false"),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].nkey=U" + "A" * 55, "broker.systemAccount=SYS"],
     'broker.systemAccount: "SYS" is not an account of broker.accounts (a); name one of them, or leave it empty'),
    (["broker.auth.enabled=false", "broker.systemAccount=SYS"],
     'broker.systemAccount: "SYS" is not an account of broker.accounts (none)'),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].nkey=U" + "A" * 55, "broker.systemAccount=a",
      "broker.configSecret.name=mine"], 'broker.systemAccount cannot go with broker.configSecret'),
    (["broker.auth.enabled=false", "broker.accounts.a.users[0].nkey=U" + "A" * 55, "broker.systemAccount=a",
      "broker.accounts.a.jetstream.enabled=true"], "broker.accounts.a.jetstream: the system account cannot have "
                                                   "JetStream"),
])
def test_bad_accounts_are_refused_at_render_time(helm_bin, values, message):
    args = ["template", "jk", str(CHART), "--kube-version", KUBE_VERSION]
    for value in values:
        args += ["--set", value]
    done = run_helm(helm_bin, *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
