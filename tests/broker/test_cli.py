"""The `jsbroker` command: nats-server's flags (parsed as Go's flag package, checked against the real binary), the
`nats-server` name, the ports file, the TOML config file, logs and SIGTERM (lame-duck) shutdown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jsbroker import __version__, flags
from jsbroker.cli import config_from_flags
from jsbroker.config import BrokerConfig, ConfigError, load_file
from tests.broker.raw import CONNECT, Raw, exchange
from tests.polling import poll
from tests.servers import JSBROKER, free_port, nats_server_binary, read_info

pytestmark = pytest.mark.xdist_group("broker-cli")


def parse(*argv: str, program: str = "jsbroker") -> BrokerConfig:
    return config_from_flags(flags.parse(list(argv))[0], program)


def test_flags_map_to_config(tmp_path):
    cfg = parse("-a", "127.0.0.1", "-p", "4333", "-m", "8333", "-sd", str(tmp_path), "--user", "u", "--pass", "p",
                "--max_payload", "2MB", "-D", "-n", "edge-1")
    assert (cfg.host, cfg.port, cfg.http_port, cfg.server_name) == ("127.0.0.1", 4333, 8333, "edge-1")
    assert cfg.jetstream is not None and cfg.jetstream.store_dir == tmp_path
    assert (cfg.auth.user, cfg.auth.password, cfg.auth.required) == ("u", "p", True)
    assert cfg.max_payload == 2 * 1024 * 1024
    assert cfg.log_level == "debug"
    assert parse("--auth", "t", "-V").auth.token == "t" and parse("-V").log_level == "trace"
    assert parse("--no_jetstream").jetstream is None and parse("-js=false").jetstream is None
    assert parse().jetstream is not None  # JetStream is on by default as jsbroker...
    assert parse(program="nats-server").jetstream is None  # ...and off as nats-server, unless -js
    assert parse("-js", program="nats-server").jetstream is not None
    assert parse("-sd", str(tmp_path), program="nats-server").jetstream is None  # as nats-server: -sd alone is no -js
    assert (parse("-p", "-1").port, parse("-p", "0").port, parse("-m", "-1").http_port, parse("-m", "0").http_port) == (
        0, 4222, 0, None)  # -1: random (jsbroker's 0); 0: the default port, no monitoring
    assert parse("--client_advertise", "nats.example:4333").client_advertise == "nats.example:4333"
    assert (parse("-T=false").logtime, parse("--logtime_utc").logtime_utc, parse("-DV").log_level) == (False, True, "trace")


def test_toml_config_file(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text(
        'listen = "127.0.0.1"\nport = 4999\nhttp_port = 8999\nmax_payload = "64KB"\nping_interval = "30s"\n'
        'write_deadline = "2s"\n'
        '[authorization]\nuser = "a"\npassword = "b"\ntimeout = "500ms"\n'
        '[jetstream]\nstore_dir = "/var/lib/js"\nsync = "always"\ndomain = "hub"\nmax_storage = "1GB"\n'
    )
    cfg = load_file(path)
    assert (cfg.host, cfg.port, cfg.http_port, cfg.max_payload) == ("127.0.0.1", 4999, 8999, 65536)
    assert (cfg.ping_interval, cfg.write_deadline) == (30.0, 2.0)
    assert (cfg.auth.user, cfg.auth.password, cfg.auth.timeout) == ("a", "b", 0.5)
    js = cfg.jetstream
    assert (str(js.store_dir), js.sync_always, js.domain, js.max_storage) == ("/var/lib/js", True, "hub", 1 << 30)
    path.write_text('[jetstream]\nsync_interval = "2m"\n')
    assert load_file(path).jetstream.sync_interval == 120.0
    path.write_text('listen = "10.0.0.1:4333"\n')
    assert (load_file(path).host, load_file(path).port) == ("10.0.0.1", 4333)
    path.write_text("[jetstream]\nenabled = false\n")
    assert load_file(path).jetstream is None
    # Flags win over the file.
    path.write_text("port = 4999\n")
    assert parse("-c", str(path), "-p", "5000").port == 5000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prot = 1\n", "unknown setting 'prot'"),
        ('ping_interval = "soon"\n', "is not a duration"),
        ('max_payload = "lots"\n', "is not a size"),
        ("max_payload = 99999999\n", "max_payload 99999999 must be between"),
        ("[authorization]\ntoken = 'x'\nuser = 'u'\npassword = 'p'\n", "cannot have a user/pass and token"),
        ("[authorization]\nuser = 'u'\n", "user and password must be given together"),
        ("[jetstream]\nsync = 'often'\n", "jetstream.sync"),
        ("port = [\n", "not valid TOML"),
    ],
)
def test_config_errors_say_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_file(path)


def test_bad_config_exits_2_with_message(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("prot = 1\n")
    out = subprocess.run([sys.executable, "-m", "jsbroker", "-c", str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1  # nats-server's for a bad config file
    assert "unknown setting 'prot'" in out.stderr
    missing = subprocess.run([sys.executable, "-m", "jsbroker", "-c", str(tmp_path / "nope.toml")],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_max_payload_flag_reaches_info(server_factory):
    handle = server_factory(JSBROKER, jetstream=False, extra_args=["--max_payload", "2048"])
    assert json.loads(Raw(handle.port).info[5:])["max_payload"] == 2048


def test_structured_debug_log_file(server_factory, tmp_path):
    log = tmp_path / "broker.log"
    handle = server_factory(JSBROKER, jetstream=False, extra_args=["-D", "-l", str(log), "--log_format", "structured"])
    assert exchange(handle.port, b"FOO\r\n") == (b"-ERR 'Unknown Protocol Operation'\r\n", True)
    assert handle.stop() == 0
    lines = log.read_text().splitlines()
    assert any(f'INFO "Server is ready" server=' in line and f"port={handle.port}" in line for line in lines), lines
    assert ' INFO "Server Exiting.." server=' in lines[-1]
    assert any(" DEBUG " in line and ' - cid:1 - Client connection created" server=' in line for line in lines), lines
    assert any("ERROR \"127.0.0.1:" in line and "Client parser ERROR: Unknown Protocol Operation" in line
               for line in lines), lines


def test_bad_log_flags():
    done = subprocess.run([sys.executable, "-m", "jsbroker", "--log_format", "json"], capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stderr) == (1, "jsbroker: --log_format 'json': use one of nats, structured\n")


def test_sigterm_flushes_pending_output_and_exits_0(server_factory, server_kind):
    handle = server_factory(server_kind, jetstream=False)
    n = 20_000
    frame = b"PUB lame.x 100\r\n" + b"d" * 100 + b"\r\n"
    with Raw(handle.port) as sub, Raw(handle.port) as pub:
        sub.send(CONNECT + b"SUB lame.x 1\r\nPING\r\n")
        assert sub.read_until(b"PONG\r\n") == b"PONG\r\n"
        pub.send(CONNECT + frame * n + b"PING\r\n")
        assert pub.read_until(b"PONG\r\n", timeout=30) == b"PONG\r\n"  # every message was routed
        assert handle.stop() == 0
        received = sub.read_to_close(timeout=30)
    assert sub.closed
    assert received.count(b"MSG lame.x 1 100\r\n") == n


def test_port_in_use_is_a_clear_error(server_factory):
    taken = server_factory(JSBROKER, jetstream=False)
    out = subprocess.run([sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-p", str(taken.port), "--no_jetstream"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert f"[FTL] Error listening on port: 127.0.0.1:{taken.port}" in out.stderr and "Traceback" not in out.stderr


def test_version_flag():
    out = subprocess.run([sys.executable, "-m", "jsbroker", "--version"], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stdout) == (0, f"jsbroker {__version__} (a Python NATS server following nats-server "
                                                "v2.15.1)\n")


def test_readme_documents_the_config_file():
    readme = (Path(__file__).resolve().parents[2] / "broker" / "README.md").read_text()
    for word in ("authorization {", "jetstream {", "sync_interval: always", "include", "--store_dir", "/healthz"):
        assert word in readme, word


FRAGMENT = r"""
import sys
from jsbroker.cli import fix_mmap_threshold
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else False
for _ in range(3):  # freeing big mapped buffers is what raises glibc's threshold by default
    big = bytearray(8 << 20)
    del big
bufs = [bytearray(b"x" * (1 << 20)) for _ in range(100)]
full = rss_mb()
del bufs[::2]  # 50 MB freed in holes between live 1 MB buffers
print(fixed, full - rss_mb())
"""


@pytest.mark.parametrize("mode", ["fixed", "default"])
def test_the_command_returns_freed_buffers_to_the_os(mode):
    """`jsbroker` fixes glibc's mmap threshold (the soak's RSS stepped up without it): 1 MB buffers freed
    between live ones leave the RSS; with glibc's default they stay (the control shows the test can fail)."""
    out = subprocess.run([sys.executable, "-c", FRAGMENT, mode], capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    if mode == "fixed":
        assert out[0] == "True" and int(out[1]) >= 45, out
    else:
        assert int(out[1]) <= 5, out


# Runs the command and prints the modules it imported once it serves clients, then exits.
STARTED = r"""
import os, sys
from jsbroker import cli, server
start = server.Broker.start
async def started(self):
    await start(self)
    print(" ".join(sorted(sys.modules)), flush=True)
    os._exit(0)
server.Broker.start = started
cli.main(sys.argv[1:])
"""
# Only some configurations or requests need these; each costs a start milliseconds (aiohttp 130-300).
LAZY = {"aiohttp", "cryptography", "prometheus_client", "h11", "tomllib", "ctypes", "jsbroker.tls", "jsbroker.metrics",
        "jsbroker.claims", "jsbroker.operator_auth", "jsbroker.resolvers",
        "jsbroker.operator_accounts"}  # the last four: operator mode's JWT code


@pytest.mark.parametrize("args", [["-m", "-1"], ["-m", "-1", "-c", "CONFIG"]])
def test_a_plain_start_does_not_import_what_it_does_not_use(tmp_path, args):
    """With the monitoring port on (every pod has it) and JetStream, a start imports neither TLS, nkey or
    Prometheus code nor an HTTP library: the first scrape, the first request or the configuration does."""
    config = tmp_path / "jsbroker.toml"
    config.write_text('server_name = "lazy"\n')
    done = subprocess.run([sys.executable, "-c", STARTED, "-a", "127.0.0.1", "-p", "-1", "-sd", str(tmp_path / "store"),
                           *(str(config) if f == "CONFIG" else f for f in args)],
                          capture_output=True, text=True, timeout=60)
    modules = set(done.stdout.split())
    assert {"jsbroker.jetstream.service", "jsbroker.monitor"} <= modules, done.stderr[-2000:]  # it did start
    imported = {m.split(".")[0] if m.split(".")[0] in LAZY else m for m in modules} & LAZY
    assert imported == ({"tomllib"} if "-c" in args else set())  # the control: a config file needs its parser


@pytest.fixture(scope="module")
def as_nats_server(tmp_path_factory) -> Path:
    """jsbroker under the name nats-server, linked by its own --nats_server_link."""
    folder = tmp_path_factory.mktemp("bin")
    jsbroker = Path(sys.executable).parent / "jsbroker"
    done = subprocess.run([str(jsbroker), "--nats_server_link", str(folder)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == str(folder / "nats-server"), done.stderr
    assert (folder / "nats-server").resolve() == jsbroker.resolve()
    other = tmp_path_factory.mktemp("other")
    (other / "nats-server").write_text("the real one")
    refused = subprocess.run([str(jsbroker), "--nats_server_link", str(other)], capture_output=True, text=True,
                             timeout=30)
    assert (refused.returncode, (other / "nats-server").read_text()) == (1, "the real one")
    assert "exists and is not a link: choose another folder or remove it" in refused.stderr
    return folder / "nats-server"


BAD_COMMAND_LINES = [
    ["--bogus"], ["-p", "abc"], ["-p"], ["-T=maybe"], ["---x"], ["-js=maybe"], ["--log_size_limit", "x"],
    ["-p", "0x1g"], ["-p", "99999999999999999999"], ["foo"], ["-t"], ["-c"], ["-", "-p", "1"],
]


def test_bad_command_lines_get_nats_servers_errors(as_nats_server):
    """The same first stderr line as nats-server, run side by side; exit 2 where nats-server's usage exits 0 after a
    flag error (Go's flag package exits 2 on its own), otherwise nats-server's code."""
    def run(binary: str, args: list[str]) -> tuple[str, int]:
        done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30)
        return done.stderr.splitlines()[0] if done.stderr else "", done.returncode

    for args in BAD_COMMAND_LINES:
        (ours, code), (theirs, their_code) = run(str(as_nats_server), args), run(nats_server_binary(), args)
        assert ours == theirs and ours, args
        assert code == (2 if their_code == 0 else their_code) and code != 0, args


def test_refused_flags_say_what_to_do_instead():
    for flag in flags.FLAGS:
        if flag.status != "refused":
            continue
        value = [] if flag.kind == "bool" else ["1" if flag.kind == "int" else "nats://127.0.0.1:6222"]
        done = subprocess.run([sys.executable, "-m", "jsbroker", "-" + flag.names[0], *value], capture_output=True,
                              text=True, timeout=30)
        assert (done.returncode, done.stderr) == (1, f"jsbroker: {flag.spelled} is not supported: {flag.note}\n")
    assert parse("-s=false", "--profile", "0").jetstream is not None  # the defaults are not refused


def test_every_nats_server_flag_is_in_the_table():
    """Those its --help lists (and the hidden ones, in the table by hand); a flag a new nats-server adds fails here."""
    text = subprocess.run([nats_server_binary(), "--help"], capture_output=True, text=True, timeout=30).stdout
    listed = {name.strip(",").lstrip("-").split("=")[0] for line in text.splitlines() if line.startswith("    ")
              for name in line.strip().split("  ")[0].replace(",", " ").split() if name.startswith("-")}
    assert listed and listed <= set(flags.BY_NAME), listed - set(flags.BY_NAME)


def test_readme_flag_table_is_generated_from_the_code():
    readme = (Path(__file__).resolve().parents[2] / "broker" / "README.md").read_text()
    table = readme.split("<!-- flags:start -->\n", 1)[1].split("<!-- flags:end -->", 1)[0]
    assert table == flags.markdown_table()


def test_help_version_and_config_check(as_nats_server, tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(as_nats_server), *args], capture_output=True, text=True, timeout=30)

    version = run("-v")
    assert version.returncode == 0 and version.stdout.splitlines()[0] == "nats-server: v2.15.1"
    assert "jsbroker" in version.stdout.splitlines()[1]
    assert run("version").stdout == version.stdout  # Go's positional commands too
    usage = run("-h")
    assert usage.returncode == 0 and "Usage: nats-server [options]" in usage.stdout
    assert all(flag.spelled in usage.stdout for flag in flags.FLAGS)
    config = tmp_path / "ok.json"
    config.write_text('{"port": 4333}')
    checked = run("-t", "-c", str(config))
    assert checked.returncode == 0
    assert checked.stderr.startswith(f"nats-server: configuration file {config} is valid (sha256:")
    config.write_text('{"prot": 1}')
    assert run("-t", "-c", str(config)).returncode == 1


def _ports_file(folder: Path, binary: str) -> tuple[dict[str, list[str]], int, bool]:
    """Start on random ports with a ports file; its content with the ports taken out, and whether [::1] answers."""
    proc = subprocess.Popen([binary, "-p", "-1", "-m", "-1", "--ports_file_dir", str(folder)], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.rstrip().endswith("Server is ready"):
                break
        # nats-server writes the file around its ready line, not always before it
        [path] = poll(lambda: list(folder.glob(f"nats-server_{proc.pid}.ports")), timeout=10, what="the ports file")
        ports = json.loads(path.read_text())
        port = int(ports["nats"][0].rsplit(":", 1)[1])
        answers = read_info(port, address="::1").startswith(b"INFO ")
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    shapes = {k: [u.rsplit(":", 1)[0] for u in urls] for k, urls in ports.items()}
    return shapes, len(list(folder.glob("*.ports"))), answers


def test_random_ports_the_ports_file_and_ipv6_loopback_as_nats_server(as_nats_server, tmp_path):
    """On the default host (0.0.0.0, dual-stack as Go's), -p -1 -m -1: the file lists every interface's URLs."""
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ours = _ports_file(tmp_path / "ours", str(as_nats_server))
    assert ours == _ports_file(tmp_path / "theirs", nats_server_binary())
    assert ours[0]["nats"][:2] == ["nats://127.0.0.1", "nats://[::1]"] and ours[1:] == (0, True)


def test_a_specific_host_answers_only_there():
    """And a ports file that cannot be written is an error line, the server runs on (as nats-server)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-p", str(port), "--no_jetstream",
                             "--ports_file_dir", "/nonexistent"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "Server is ready" in line:
                break
        assert "[ERR] Error writing ports file (/nonexistent/jsbroker_" in lines[-2], lines
        assert read_info(port).startswith(b"INFO ")
        with pytest.raises(OSError):
            read_info(port, address="::1")
    finally:
        proc.terminate()
        proc.wait(timeout=15)


BAD_VALUES = [
    (["-P", "/nonexistent/x.pid"], "[FTL] Could not write pidfile: [Errno 2] No such file or directory"),
    (["-l", "/nonexistent/x.log"], "jsbroker: error opening file: [Errno 2] No such file or directory"),
    (["-m", "-5"], "jsbroker: -m -5 is not a TCP port: give 1-65535, or -1 for a random one"),
    (["-ms", "70000"], "jsbroker: -ms 70000 is not a TCP port"),
    (["-p", "-2"], "jsbroker: -p -2 is not a TCP port"),
    (["--client_advertise", "a:b:c"], "jsbroker: --client_advertise: address a:b:c: too many colons in address"),
    (["-c", "/nonexistent.toml"], "jsbroker: config file /nonexistent.toml does not exist"),
    (["-sl", "ldm=/nonexistent.pid"], "jsbroker: cannot read the pid file /nonexistent.pid"),
    (["-sl", "bogus"], "jsbroker: unknown signal 'bogus'"),
    (["-js", "-sd", "/proc/x"], "[FTL] Can't start JetStream: could not create storage directory - "),
    (["--max_payload", "lots"], "jsbroker: --max_payload: 'lots' is not a size"),
    (["--lame_duck_duration", "soon"], "jsbroker: --lame_duck_duration: 'soon' is not a duration"),
    (["--tlscert", "/nonexistent.pem", "--tlskey", "/nonexistent.key"], "cannot read /nonexistent.pem"),
    (["--tls"], "jsbroker: TLS Server certificate must be present and valid: give --tlscert and --tlskey"),
]


def test_bad_flag_values_exit_1_saying_what_is_wrong():
    """nats-server's exit code for each (checked by hand: 1), with a line naming the flag or file and the fix."""
    for args, message in BAD_VALUES:
        done = subprocess.run([sys.executable, "-m", "jsbroker", "-a", "127.0.0.1", "-p", "-1", *args],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
