"""Reading a big file store must not load it into RAM: only the index lives in memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from jsbroker.store import SyncPolicy
    from jsbroker.store.base import StoreLimits
    from jsbroker.store.file import FileStore

    def rss_kb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

    mode, directory, total, size = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    payload = bytes(range(256)) * (size // 256)
    if mode == "write":
        store = FileStore(directory, StoreLimits(), SyncPolicy())
        for i in range(total // size):
            store.store_msg(f"big.{i % 100}", b"", payload)
        store.close()
        sys.exit(0)
    before = rss_kb()
    store = FileStore(directory, StoreLimits(), SyncPolicy())
    opened = rss_kb()
    n = nbytes = 0
    for msg in store.messages():
        assert msg.data == payload
        n += 1
        nbytes += len(msg.data)
    last = store.load_last_msg("big.7")
    after = rss_kb()
    print(json.dumps({"before": before, "opened": opened, "after": after, "msgs": n, "bytes": nbytes,
                      "last7": last.seq}))
    """
)


@pytest.mark.slow
def test_reading_200mb_keeps_rss_small(tmp_path):
    total, size = 200 << 20, 16 << 10
    def run(mode: str) -> str:
        args = [sys.executable, "-c", CHILD, mode, str(tmp_path / "big"), str(total), str(size)]
        return subprocess.run(args, capture_output=True, text=True, timeout=240, check=True).stdout

    run("write")
    out = run("read")  # a fresh process: RSS before opening is the interpreter and imports only
    r = json.loads(out)
    assert r["msgs"] == total // size and r["bytes"] == total and r["last7"] == total // size - 92
    growth_mb = (r["after"] - r["before"]) / 1024
    print(f"RSS growth reading {total >> 20} MB: {growth_mb:.1f} MB", r)
    assert growth_mb < 20, r  # 200 MB read; the index for 12.8k messages is a few hundred KB
