"""The accounts as nats-server 2.15.1's monitoring shows them: /accountz (the names, or one account's detail:
its exports, imports, JetStream and sublist) and /accstatz (each account's connections and traffic). One
builder for the HTTP endpoints (monitor.py) and the system account's ACCOUNTZ, INFO and STATZ requests
(system_account.py), so both answer alike.

An account's traffic is its open connections' plus what its closed ones had: the server tells `closed()`
each connection that goes (nats-server keeps the same sums per account).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from .accounts import Account
from .go_time import rfc3339


class AccountClient(Protocol):
    """What the account views read of a client connection."""

    account: Account
    connected: bool
    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int


class AccountsHost(Protocol):
    """What the account views read of the server (server.py's `Broker`)."""

    @property
    def server_id(self) -> str: ...

    @property
    def clients(self) -> Mapping[int, AccountClient]: ...

    def jetstream_domain(self) -> str | None:
        """None: JetStream is off."""

    def started_at(self) -> float: ...


class UnknownAccount(LookupError):
    """An account the request names that the server does not have (nats-server's words)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Account {name} does not exist")


# The system account's exports as nats-server lists them (the services jsbroker answers there)
_SYSTEM_EXPORTS = (("$SYS.REQ.ACCOUNT.*.STATZ", "Streamed"), ("$SYS.REQ.USER.*.INFO", "Singleton"),
                   ("$JS.API.>", "Singleton"), ("$SYS.REQ.ACCOUNT.*.CONNZ", "Streamed"))


def _traffic(msgs: int, size: int) -> dict[str, Any]:
    zero = {"msgs": 0, "bytes": 0}
    return {"msgs": msgs, "bytes": size, "gateways": zero, "routes": zero, "leafs": zero}


class AccountViews:
    def __init__(self, host: AccountsHost, accounts: Mapping[str, Account], system: Account | None) -> None:
        self.host, self.accounts, self.system = host, accounts, system
        self._closed: dict[str, list[int]] = {}  # account -> in msgs, in bytes, out msgs, out bytes

    def closed(self, c: AccountClient) -> None:
        """A connected client is gone: its traffic stays its account's."""
        sums = self._closed.setdefault(c.account.name, [0, 0, 0, 0])
        for i, value in enumerate((c.in_msgs, c.in_bytes, c.out_msgs, c.out_bytes)):
            sums[i] += value

    # -- /accountz ---------------------------------------------------------------------------------------

    def accountz(self, name: str = "") -> dict[str, Any]:
        """nats-server's Accountz: every account's name, or `name`'s detail (UnknownAccount if it has none)."""
        body: dict[str, Any] = {"server_id": self.host.server_id, "now": rfc3339(time.time())}
        if self.system is not None:
            body["system_account"] = self.system.name
        if not name:
            body["accounts"] = sorted(self.accounts)
            return body
        account = self.accounts.get(name)
        if account is None:
            raise UnknownAccount(name)
        body["account_detail"] = self.account_info(account)
        return body

    def account_info(self, account: Account) -> dict[str, Any]:
        """nats-server's AccountInfo (/accountz?acc=, `$SYS.REQ.ACCOUNT.<acc>.INFO`): the account's use, its
        exports and imports (the system ones too) and its sublist."""
        jetstream = self.host.jetstream_domain() is not None
        info: dict[str, Any] = {"account_name": account.name, "update_time": rfc3339(self.host.started_at())}
        if account is self.system:
            info["is_system"] = True
        info.update(expired=False, complete=True, jetstream_enabled=account.jetstream and jetstream,
                    leafnode_connections=0, client_connections=len(self._connections(account)),
                    subscriptions=account.sublist.count)
        exports = [_export(e.subject, e.service, e.response_type.capitalize(), e.accounts)
                   for e in account.settings.exports]
        if account is self.system:
            exports += [_export(subject, True, kind, None) for subject, kind in _SYSTEM_EXPORTS]
        if exports:
            info["exports"] = exports
        imports = self._imports(account, jetstream)
        if imports:  # nats-server's order is its map's (random): sorted here
            info["imports"] = sorted(imports, key=lambda i: (i["local_subject"], i["subject"]))
        info.update(name_tag=account.name, sublist_stats={"num_subscriptions": account.sublist.count, "num_cache": 0,
                                                          "num_inserts": 0, "num_removes": 0, "num_matches": 0,
                                                          "cache_hit_rate": 0.0, "max_fanout": 0, "avg_fanout": 0.0})
        return info

    def _imports(self, account: Account, jetstream: bool) -> list[dict[str, Any]]:
        imports = []
        for imp in account.settings.imports:
            item: dict[str, Any] = {"subject": imp.subject, "account": imp.account}
            if imp.service and imp.local != imp.subject:
                item["to"] = imp.local
            imports.append({**item, "local_subject": imp.local, "type": "service" if imp.service else "stream",
                            "invalid": False, "share": False, "tracking": False})
        if self.system is None:
            return imports
        system = [("$SYS.REQ.USER.INFO", f"$SYS.REQ.USER.{account.name}.INFO", True)]
        if account is not self.system:  # nats-server's system imports of every other account
            system += [("$SYS.REQ.ACCOUNT.PING.CONNZ", f"$SYS.REQ.ACCOUNT.{account.name}.CONNZ", False),
                       ("$SYS.REQ.SERVER.PING.CONNZ", f"$SYS.REQ.ACCOUNT.{account.name}.CONNZ", False),
                       ("$SYS.REQ.ACCOUNT.PING.STATZ", f"$SYS.REQ.ACCOUNT.{account.name}.STATZ", False)]
            if jetstream:  # nats-server lists the JetStream API import in every account while JetStream is on
                system.append(("$JS.API.>", "$JS.API.>", True))
        return imports + [{"subject": subject, "account": self.system.name, "to": local, "local_subject": local,
                           "type": "service", "invalid": False, "share": share, "tracking": False}
                          for local, subject, share in system]

    # -- /accstatz ---------------------------------------------------------------------------------------

    def accstatz(self, names: tuple[str, ...] = (), unused: bool = False) -> dict[str, Any]:
        """nats-server's AccountStatz: the accounts (`names`' only, when given; unknown names are passed over)
        with connections, or all of them with `unused`."""
        accounts = [self.accounts[n] for n in (names or sorted(self.accounts)) if n in self.accounts]
        stats = [self.account_stat(a) for a in accounts]
        return {"server_id": self.host.server_id, "now": rfc3339(time.time()),
                "account_statz": [s for s in stats if unused or s["conns"]]}

    def account_stat(self, account: Account) -> dict[str, Any]:
        """One account's entry of /accstatz (and of the account_connections event)."""
        conns = self._connections(account)
        in_msgs, in_bytes, out_msgs, out_bytes = self._closed.get(account.name) or (0, 0, 0, 0)
        return {"acc": account.name, "name": account.name, "conns": len(conns), "leafnodes": 0,
                "total_conns": len(conns), "num_subscriptions": account.sublist.count,
                "sent": _traffic(out_msgs + sum(c.out_msgs for c in conns), out_bytes + sum(c.out_bytes for c in conns)),
                "received": _traffic(in_msgs + sum(c.in_msgs for c in conns), in_bytes + sum(c.in_bytes for c in conns)),
                "slow_consumers": 0}

    def _connections(self, account: Account) -> list[AccountClient]:
        return [c for c in self.host.clients.values() if c.connected and c.account is account]


def _export(subject: str, service: bool, response_type: str, accounts: tuple[str, ...] | None) -> dict[str, Any]:
    item: dict[str, Any] = {"subject": subject, "type": "service" if service else "stream"}
    if service:
        item["response_type"] = response_type
    if accounts:
        item["approved_accounts"] = list(accounts)
    return item
