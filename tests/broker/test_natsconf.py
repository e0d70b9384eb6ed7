"""nats-server's config file format: the parser (natsconf.py), every error with its file:line:column, and
the same files given to `nats-server -t` and to jsbroker (accepted or refused alike for the settings both
have; refused by jsbroker, naming the setting, for those only nats-server has), then started: the values
both servers show in INFO and /varz are equal."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from jsbroker.config import ConfigError, SubjectRules, load_file
from jsbroker.natsconf import ConfSyntaxError, parse
from tests.broker import settings_table
from tests.polling import poll
from tests.servers import free_port, nats_server_binary, read_info


def plain(text: str, env: dict[str, str] | None = None, files: dict[str, str] | None = None) -> dict[str, object]:
    def read(path: str) -> str:
        if files is None or path not in files:
            raise FileNotFoundError(2, "No such file or directory")
        return files[path]

    return {k: v.plain() for k, v in parse(text, "/etc/nats/main.conf", read, env or {}).items()}


@pytest.mark.parametrize(("text", "expected"), [
    ("port: 4222\nhost = 127.0.0.1\nserver_name js-0\n", {"port": 4222, "host": "127.0.0.1", "server_name": "js-0"}),
    ("listen: 0.0.0.0:4222; http: localhost:8222, ", {"listen": "0.0.0.0:4222", "http": "localhost:8222"}),
    ('{"port": 4222, "debug": true, "a": [1, 2 ]}', {"port": 4222, "debug": True, "a": [1, 2]}),  # JSON
    ("jetstream {\n  store_dir: '/data'  # comment\n  max_mem: 1G, max_file = 10GiB // another\n}\n",
     {"jetstream": {"store_dir": "/data", "max_mem": 10**9, "max_file": 10 << 30}}),
    ("a: 1k\nb: 1kb\nc: 1KiB\nd: 2MB\ne: 2mi\nf: 1g\ng: 3T\nh: -2k\n",
     {"a": 1000, "b": 1024, "c": 1024, "d": 2 << 20, "e": 2 << 20, "f": 10**9, "g": 3 * 10**12, "h": -2000}),
    ("a: 1.5\nb: -0.25\nc: 10.0.0.1\nd: 10.0.0.1:4222\ne: 1x\n",
     {"a": 1.5, "b": -0.25, "c": "10.0.0.1", "d": "10.0.0.1:4222", "e": "1x"}),
    ("a: yes\nb: OFF\nc: on\nd: False\ne: \"true\"\n", {"a": True, "b": False, "c": True, "d": False, "e": "true"}),
    ("d: 2016-05-04T18:53:41Z\n", {"d": datetime.datetime(2016, 5, 4, 18, 53, 41, tzinfo=datetime.timezone.utc)}),
    ('a: "t\\tn\\n\\"q\\" \\\\ \\x41"\nb: \'raw\\n\'\nc: bare\\tstring\n',
     {"a": 't\tn\n"q" \\ A', "b": "raw\\n", "c": "bare\tstring"}),
    ("a: [\n  x  # one\n  \"y\", 'z'\n]\nb: []\nc: [{u: 1}, {u: 2}]\n",
     {"a": ["x", "y", "z"], "b": [], "c": [{"u": 1}, {"u": 2}]}),
    ("text: (\nline one\n  line two\n)\n", {"text": "\nline one\n  line two"}),
    ("a\n  = 1\nb {\n  c d\n}\n", {"a": 1, "b": {"c": "d"}}),
    ('"quoted key": 1\n\'single\' = 2\n', {"quoted key": 1, "single": 2}),
    ("port: 1\nport: 2\n", {"port": 2}),  # a later key replaces an earlier one, as in nats-server
    ("pw: $2a$11$abc\n", {"pw": "$2a$11$abc"}),  # a bcrypt hash is not a variable
])
def test_values(text, expected):
    assert plain(text) == expected


def test_variables_are_block_scoped_then_from_the_environment():
    text = ("USER: app\nsize: 1MB\nauthorization {\n  PASS: inner\n  user: $USER\n  password: $PASS\n}\n"
            "x: $size\ny: $FROM_ENV\nz: $ENV_LIST\n")
    got = plain(text, env={"FROM_ENV": "2KB", "ENV_LIST": "[a, b ]", "USER": "not-this-one"})
    assert got["authorization"] == {"PASS": "inner", "user": "app", "password": "inner"}
    assert (got["x"], got["y"], got["z"]) == (1 << 20, 2048, ["a", "b"])
    with pytest.raises(ConfSyntaxError, match=r"main.conf:2:11: Parse error on line 2: variable \$PASS is not defined"):
        plain("a { PASS: x }\nb { pass: $PASS }\n")  # a sibling block's keys are not in scope


def test_include_is_relative_to_the_including_file_and_merged_where_it_is():
    files = {"/etc/nats/auth.conf": "authorization { token: $T }\nT: s3cret\n",
             "/etc/nats/sub/js.conf": "include ../limits.conf\nstore_dir: /data\n",
             "/etc/nats/limits.conf": "max_mem: 1G\n"}
    text = "T: outer\ninclude auth.conf\njetstream {\n  include 'sub/js.conf'\n}\nport: 4222\n"
    with pytest.raises(ConfSyntaxError, match=r"auth\.conf:1:24: Parse error on line 1: variable \$T is not defined"):
        plain(text, files=files)  # an included file is parsed on its own: the includer's keys are not in scope
    files["/etc/nats/auth.conf"] = "T: s3cret\nauthorization { token: $T }\n"
    assert plain(text, files=files) == {"T": "s3cret", "authorization": {"token": "s3cret"},
                                        "jetstream": {"max_mem": 10**9, "store_dir": "/data"}, "port": 4222}


@pytest.mark.parametrize(("text", "where", "message"), [
    ('port: "abc\n', "1:7", "unterminated string opened at line 1 column 7"),
    ("x: 'abc\n", "1:4", "unterminated string"),
    ("jetstream {\n  store_dir: /x\n", "3:1", "the map opened at line 1 column 11 has no closing '}'"),
    ("a: [1, 2\n", "2:1", "the array opened at line 1 column 4 has no closing ']'"),
    ("a: [1, 2]\n", "1:9", "a whole number directly before ']'"),
    ("a: [, 1]\n", "1:5", "unexpected ',' in an array"),
    ("a: [1 2]\n", "1:7", "expected ',' or ']' after an array value"),
    ("text: (\nnever closed\n", "1:7", "unterminated block string opened at line 1 column 7"),
    ("port: $NOPE\n", "1:7", r"variable \$NOPE is not defined"),
    ("include nope.conf\n", "1:1", "cannot include 'nope.conf': No such file or directory"),
    ("include\n", "1:8", "include needs a file name"),
    ('x: "\\q"\n', "1:7", "invalid escape character 'q'"),
    ('x: "\\xZZ"\n', "1:9", "expected two hexadecimal digits after"),
    ("max_payload: 1kbb\n", "1:18", "1kbb is not a size"),
    ("big: 9223372036854775808\n", "1:25", "out of the range of a 64-bit integer"),
    ("big: 10E\n", "1:9", "out of the range of a 64-bit integer"),
    ("port: 4222 x\n", "1:12", "expected a new line, ',' or ';' after the value of 'port', found 'x'"),
    ("a { b: 1 } c\n", "1:12", "after the value of 'a'"),
    ("x: 1.\n", "1:6", "floats must have a digit after the '.'"),
    ("x: .5\n", "1:4", "floats must start with a digit"),
    ("x: -a\n", "1:5", "expected a digit after '-'"),
    ("d: 2016-05-04\n", "1:14", "in an ISO8601 datetime"),
    ("d: 16-05-04T18:53:41Z\n", "1:6", "all ISO8601 dates must be in full Zulu form"),
    ("d: 2016-13-04T18:53:41Z\n", "1:24", "not a valid Zulu datetime"),
    ("port:\n", "1:1", "'port' has no value"),
    ("a { = 1 }\n", "1:5", "unexpected '=' where a key was expected"),
    ("port: 1\n: 2\n", "2:1", "unexpected ':' where a key was expected"),
    ("}\n", "1:1", "unexpected '}' where a key was expected"),
    ('"key: 1\n', "1:1", "unterminated quoted key"),
    ("x: $BAD\n", "1:4", "the environment variable BAD could not be parsed"),
])
def test_syntax_errors_name_file_line_and_column(text, where, message):
    with pytest.raises(ConfSyntaxError, match=f"^/etc/nats/main.conf:{where}: .*{message}"):
        plain(text, env={"BAD": '"unterminated'})


def test_an_include_cycle_is_refused():
    files = {"/etc/nats/a.conf": "include b.conf\n", "/etc/nats/b.conf": "port: 1\ninclude ./a.conf\n"}
    with pytest.raises(ConfSyntaxError, match=r"^/etc/nats/b.conf:2:1: './a.conf' includes itself through /etc/nats/a"):
        plain("include a.conf\n", files=files)


def test_an_environment_variable_that_refers_to_itself_is_a_cycle():
    with pytest.raises(ConfSyntaxError, match=r"reference cycle for \$LOOP"):
        plain("x: $LOOP\n", env={"LOOP": "$LOOP"})


# -- nats-server and jsbroker given the same files ---------------------------------------------------------

def nats_server_accepts(path: Path) -> tuple[bool, str]:
    out = subprocess.run([nats_server_binary(), "-c", str(path), "-t"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0, out.stderr + out.stdout


def jsbroker_accepts(path: Path) -> tuple[bool, str]:
    try:
        load_file(path, env={})
        return True, ""
    except ConfigError as e:
        return False, str(e)


BOTH_ACCEPT = [
    "authorization { user: a, password: \"$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG\" }\n",
    "port: 4333\nhost: 127.0.0.1\nserver_name: js-0\n",
    "listen: 127.0.0.1:-1\nhttp: 127.0.0.1:8222\n",
    "port: -1\nhttp_port: -1\n",
    "max_payload: 2MB\nmax_pending: 64MB\nmax_control_line: 4KB\nmax_connections: 100\n",
    'ping_interval: "30s"\nping_max: 3\nwrite_deadline: "2s"\n',
    'lame_duck_duration: "1m"\nlame_duck_grace_period: "5s"\n',
    "debug: true\ntrace: false\nlogtime: true\n",
    "logtime: false\nlogtime_utc: true\n",
    "websocket { port: 8080, no_tls: true, compression: true }\n",
    "authorization { user: app, password: secret, timeout: 3 }\n",
    'authorization { token: "s3cret" }\n',
    "authorization {\n  users: [\n    {user: a, password: b, permissions: {publish: [\"a.>\"], subscribe: "
    "{allow: [\"_INBOX.>\"], deny: \"x\"}, allow_responses: true}}\n"
    "    {nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4}\n  ]\n}\n",
    "jetstream {\n  store_dir: /tmp/jsbroker-conf-test\n  max_mem: 1G\n  max_file: \"10G\"\n  sync_interval: always\n"
    "  domain: hub\n}\n",
    "jetstream: enabled\n",
    "jetstream: false\nstore_dir: /tmp/x\n",
    "PORT: 4444\nport: $PORT\n",  # a key used as a variable is not an unknown setting
    "pid_file: /tmp/jsbroker-conf-test.pid\nlog_file: /tmp/jsbroker-conf-test.log\n",
    "accounts { SYS { users: [ {user: a, password: b} ] } }\nsystem_account: SYS\n",
    'system_account: "$SYS"\n',
    "no_system_account: true\n",
]
BOTH_REFUSE = [
    ("foo: 1\n", "1:1: unknown setting 'foo'"),
    ("jetstream { foo: 1 }\n", "1:13: unknown setting 'jetstream.foo'"),
    ("authorization { user: a, password: b, foo: 1 }\n", "1:39: unknown setting 'authorization.foo'"),
    ("port: $UNDEFINED_HERE\n", "variable $UNDEFINED_HERE is not defined"),
    ('port: "abc\n', "unterminated string"),
    ("port: 4222 x\n", "expected a new line"),
    ("jetstream {\n", "has no closing '}'"),
    ("include missing.conf\n", "cannot include 'missing.conf'"),
    ("a: [1, 2]\n", "before ']'"),
    ('max_payload: "1MB"\n', "max_payload must be a whole number"),
    ("max_payload: 3000000000\n", "max_payload value is too big"),
    ("authorization { user: a, password: b, token: c }\n", "cannot have a user/pass and token"),
    ("authorization { token: 12345 }\n", "authorization.token must be a string"),
    ("store_dir: /a\njetstream { store_dir: /b }\n", "duplicate 'store_dir'"),
    ('jetstream { max_file: "10GB" }\n', "must end in K, M, G or T"),
    ("jetstream: sometimes\n", "expected 'enabled' or 'disabled'"),
    ('ping_interval: "soon"\n', "is not a duration"),
    ("lame_duck_duration: \"10s\"\n", "minimum is 30 seconds"),
    ("lame_duck_duration: 60\n", "must be a duration string"),
    ("server_name: \"a b\"\n", "server name cannot contain spaces"),
    ('listen: "nonsense"\n', "could not parse address string"),
    ("authorization { users: [ {user: a, password: b}, {user: a, password: c} ] }\n", "duplicate user 'a'"),
]
ONLY_NATS_SERVER = [  # settings nats-server has and jsbroker refuses, naming them
    ("cluster { port: 6222 }\n", "1:1: cluster: nats-server's setting is not supported by jsbroker"),
    ("gateway { name: x }\n", "gateway:"),
    ("leafnodes { port: 7422 }\n", "leafnodes:"),
    ("accounts { A { nkey: ABEAOWSZPZZBUFLOFYDZTXS4YDCTETOG47VPDTOUMJIINDWFGIK53HL3 } }\n", "accounts.A.nkey:"),
    ("mqtt { port: 1883 }\n", "mqtt:"),
    ("max_subscriptions: 10\n", "max_subscriptions:"),
    ("jetstream { cipher: aes }\n", "jetstream.cipher:"),
    ("max_connections: 0\n", "jsbroker needs a positive limit"),
]


@pytest.mark.parametrize("text", BOTH_ACCEPT)
def test_both_accept(tmp_path, text):
    path = tmp_path / "server.conf"
    path.write_text(text)
    assert nats_server_accepts(path)[0], nats_server_accepts(path)[1]
    assert jsbroker_accepts(path) == (True, "")


@pytest.mark.parametrize(("text", "message"), BOTH_REFUSE)
def test_both_refuse(tmp_path, text, message):
    path = tmp_path / "server.conf"
    path.write_text(text)
    assert not nats_server_accepts(path)[0]
    accepted, error = jsbroker_accepts(path)
    assert not accepted and error.startswith(str(path)) and message in error, error


@pytest.mark.parametrize(("text", "message"), ONLY_NATS_SERVER)
def test_settings_only_nats_server_has_are_refused_by_name(tmp_path, text, message):
    path = tmp_path / "server.conf"
    path.write_text(text)
    assert nats_server_accepts(path)[0], nats_server_accepts(path)[1]
    accepted, error = jsbroker_accepts(path)
    assert not accepted and error.startswith(f"{path}:") and message in error, error


@pytest.mark.parametrize(("text", "ports"), [
    ("port: -1\nhttp_port: -1\n", (0, 0)),  # nats-server's random port is jsbroker's 0
    ("port: 0\nhttp_port: 0\n", (4222, None)),  # nats-server's 0: not set (checked: it listens on 4222)
    ("listen: 127.0.0.1:0\nhttp: 127.0.0.1:-1\n", (4222, 0)),
    ("listen: 4333\nhttp: 8333\n", (4333, 8333)),
])
def test_port_numbers_mean_what_they_mean_to_nats_server(tmp_path, text, ports):
    path = tmp_path / "server.conf"
    path.write_text(text)
    cfg = load_file(path)
    assert (cfg.port, cfg.http_port) == ports


def test_tls_block_is_read_alike(tmp_path):
    from tests.broker.certs import Authority

    ca = Authority(tmp_path / "ca")
    server = ca.issue("server", server=True)
    path = tmp_path / "server.conf"
    path.write_text(f'tls {{\n  cert_file: "{server.cert}"\n  key_file: "{server.key}"\n  ca_file: "{ca.ca}"\n'
                    '  verify: true\n  timeout: 3\n}\n')
    assert nats_server_accepts(path)[0] and jsbroker_accepts(path) == (True, "")
    tls = load_file(path).tls
    assert tls is not None and (tls.cert_file, tls.verify, tls.timeout) == (server.cert, True, 3.0)
    path.write_text(f'tls {{ cert_file: "{server.cert}", key_file: "{server.key}", handshake_first: true }}\n')
    assert nats_server_accepts(path)[0] and jsbroker_accepts(path) == (True, "")
    tls = load_file(path).tls
    assert tls is not None and (tls.handshake_first, tls.handshake_first_fallback) == (True, 0.0)


def started(command: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CONF_TEST_NAME": "conf-test"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)

    def ready() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            read_info(port)
            return True
        except OSError:
            return False

    poll(ready, timeout=20)
    return proc


VARZ_FIELDS = ("port", "host", "server_name", "max_payload", "max_pending", "max_control_line", "max_connections",
               "ping_interval", "ping_max", "write_deadline", "auth_timeout", "http_port", "auth_required")


def test_the_same_file_gives_the_same_server(tmp_path):
    """Everything a file sets that INFO and /varz show, equal on both servers (ports differ: each its own);
    with an include, a variable from the included file, one from the environment and a repeated key."""
    infos, varzs = {}, {}
    for kind in ("nats-server", "jsbroker"):
        port, http = free_port(), free_port()
        include = tmp_path / kind / "auth.conf"
        include.parent.mkdir()
        include.write_text("USER_NAME: app\nauthorization {\n  user: $USER_NAME\n  password: 's3cret'\n"
                           '  timeout: "3s"\n}\n')
        path = tmp_path / kind / "server.conf"
        path.write_text(
            f"# one file, two servers\nhost: 127.0.0.1\nport: {port}\nhttp: 127.0.0.1:{http}\n"
            "server_name: $CONF_TEST_NAME\nmax_payload: 1KB\nmax_payload: 512KB\nmax_pending: 32MB\n"
            "max_control_line: 2KB\n"
            'max_connections: 1000\nping_interval: "45s"\nping_max: 4\nwrite_deadline: "3s"\ninclude auth.conf\n'
            f"jetstream {{ store_dir: '{tmp_path / kind / 'js'}', max_mem: 64M, max_file: 1G }}\n")
        command = ([nats_server_binary(), "-c", str(path)] if kind == "nats-server"
                   else [sys.executable, "-m", "jsbroker", "-c", str(path)])
        proc = started(command, port, tmp_path / kind / "log")
        try:
            infos[kind] = json.loads(read_info(port)[5:])
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/varz", timeout=5) as r:
                varzs[kind] = json.loads(r.read())
            infos[kind]["port_matches"] = infos[kind]["port"] == port
            varzs[kind]["http_port_matches"] = varzs[kind]["http_port"] == http
            varzs[kind]["port"] = varzs[kind]["http_port"] = 0
            varzs[kind]["js"] = {k: varzs[kind]["jetstream"]["config"][k] for k in ("max_memory", "max_storage")}
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    pick = ("port_matches", "max_payload", "auth_required", "jetstream", "server_name", "host", "headers")
    assert {k: infos["jsbroker"].get(k) for k in pick} == {k: infos["nats-server"].get(k) for k in pick}
    fields = (*VARZ_FIELDS, "http_port_matches", "js")
    assert {k: varzs["jsbroker"].get(k) for k in fields} == {k: varzs["nats-server"].get(k) for k in fields}
    assert varzs["jsbroker"]["server_name"] == "conf-test"
    assert varzs["jsbroker"]["max_payload"] == 512 * 1024
    assert varzs["jsbroker"]["js"]["max_memory"] == 64 * 10**6  # M: a million


def test_readme_settings_table_is_the_codes():
    """Run `python3 -m tests.broker.settings_table` after changing a table in config.py."""
    readme = settings_table.README.read_text()
    assert settings_table.rendered(readme) == readme


def readme_example() -> str:
    readme = settings_table.README.read_text()
    return "# nats-server.conf:" + readme.split("# nats-server.conf:", 1)[1].split("```", 1)[0]


def test_readme_example_without_jsbroker_settings_is_valid_for_nats_server(tmp_path):
    """The example's own settings aside (tls.reload_interval, jetstream.account) and its tls block (its files
    do not exist here), nats-server accepts it."""
    example = re.sub(r"\ntls \{.*?\n\}\n", "\n", readme_example(), flags=re.S)
    example = re.sub(r"\n  account \{.*?\n  \}\n", "\n", example, flags=re.S)
    assert "reload_interval" not in example and "account" not in example and "jetstream {" in example
    path = tmp_path / "server.conf"
    path.write_text(example)
    checked = subprocess.run([nats_server_binary(), "-c", str(path), "-t"], capture_output=True, text=True,
                             timeout=30, env={**os.environ, "APP_PASSWORD": "from-env"})
    assert checked.returncode == 0, checked.stderr


def test_readme_example_is_read_as_written(tmp_path):
    path = tmp_path / "server.conf"
    path.write_text(readme_example())
    cfg = load_file(path, env={"APP_PASSWORD": "from-env"})
    assert (cfg.host, cfg.port, cfg.http_port, cfg.max_payload, cfg.ping_interval) == ("0.0.0.0", 4222, 8222, 1 << 20,
                                                                                       120.0)
    orders, nkey_user = cfg.auth.users
    assert (orders.user, orders.password, nkey_user.nkey is not None) == ("orders-app", "from-env", True)
    assert orders.permissions is not None and orders.permissions.response_max == 1
    assert orders.permissions.publish == SubjectRules(allow=("orders.>", "$JS.API.>"), deny=("orders.secret",))
    assert orders.permissions.subscribe == SubjectRules(allow=("orders.>", "_INBOX.>"))
    assert cfg.tls is not None and cfg.tls.verify and cfg.tls.reload_interval == 30.0
    js = cfg.jetstream
    assert js is not None and (js.sync_always, js.domain, js.max_storage, js.account.max_streams) == (True, "hub",
                                                                                                      100 * 10**9, 100)
