"""What every part of a JetStream consumer shares: its state and configuration (`ConsumerBase`), the stream
it consumes (`ConsumedStream`) and the parts' calls to one another, declared once.

A consumer is one object built from one class per concept, each in its module: `DeliveryPass`
(delivery_pass.py) sends what it can in one pass per loop turn; `AckProcessing` (consumer_acks.py) takes
acks, naks and terms, writes them to the store, answers ack_sync once durable and runs the ack-wait timer;
`ConsumerTimers` (consumer_timers.py) a push consumer's interest, idle heartbeats and flow control, and
the inactivity and pause timers; `ConsumerInfo` (consumer_info.py) and `ConsumerReset` (consumer_reset.py)
answer CONSUMER.INFO and CONSUMER.RESET; `Consumer` (consumer.py) puts them together with the lifecycle,
the starting position and the hooks the stream calls.

State lives in pure modules and the parts do the I/O around it (store writes, advisories, timers, the bus):
`delivery` (`delivery.py`) where delivery stands, what awaits an ack and what is due for redelivery;
`waiting` (`pull.py`) the pull requests; `priority` (`priority.py`) the priority groups; `flow` and
`pacing` (`push.py`) a push consumer's flow control and replay / rate limit. The I/O of pull requests
(taking them in, their timer, sweeping, choosing the request a delivery goes to) is `pulls`
(`pull_requests.py`), that of the pin of priority groups (its TTL timer, the advisories) `pins` (`pins.py`).
Timers are one handle per concern (ack wait, pull requests, heartbeat, inactivity, pause, replay/rate),
never one per message. Handlers run inside the core's routing and never block.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from jsbroker import store as storage
from jsbroker import subjects
from jsbroker.store.base import ConsumerStore, StoredMsg, StreamStore

from . import ack, priority, pull, push, rate
from .consumer_config import ConsumerConfig
from .delivery import DeliveryState, Dropped
from .pins import Pins
from .pull_requests import PullRequests
from .stream_config import StreamConfig
from .timer import Timer
from .times import now_ns

if TYPE_CHECKING:
    from pathlib import Path

    from jsbroker.internal import Delivery, InterestWatch, InternalBus, InternalSubscription

# rate_limit_bps: the burst without a stream max_msg_size is the max payload (the default one: the server's
# max_payload setting is not known here), and the ack reply's tokens after its prefix are about this long.
DEFAULT_MAX_PAYLOAD = 1024 * 1024
ACK_REPLY_TAIL = 30
RUN_BUDGET = 4096  # messages per delivery pass before yielding the loop
READ_AHEAD_FIRST, READ_AHEAD_MAX = 8, 256  # new messages read per store call in a pass: doubling up to max
READ_AHEAD_BYTES = 1 << 20  # and at most this many bytes of them (one message at least): large messages
# Deliveries handed to the core at once: 8, then doubling up to 128 within a pass. The core writes each
# batch at once, so the client starts on the first messages while the pass goes on.
OUT_FIRST, OUT_MAX = 8, 128
OUT_BYTES = 256 * 1024  # a batch to the core is sent at this size too, so large messages see backpressure soon


class ConsumedStream(Protocol):
    """What a consumer needs from its stream (implemented by jetstream/stream.py's `Stream`)."""

    name: str
    bus: InternalBus
    store: StreamStore
    config: StreamConfig  # read live: a stream update may change retention and limits

    @property
    def domain(self) -> str | None: ...  # advisories name it

    def acked(self, seq: int) -> None: ...  # with interest / workqueue retention the stream may drop it


@dataclass(slots=True)
class _Subs:
    items: list[InternalSubscription] = field(default_factory=list)
    watch: InterestWatch | None = None


class ConsumerBase(ABC):
    """One consumer of one stream: the state its parts share. Created, restored and deleted by the consumer
    registry (`registry.py`), which attaches it with `stream.add_consumer`; `directory` holds its files
    (None: nothing on disk)."""

    def __init__(
        self,
        stream: ConsumedStream,
        name: str,
        cfg: ConsumerConfig,
        store: ConsumerStore,
        directory: Path | None,
        created_ns: int = 0,
        on_inactive: Callable[[], None] | None = None,  # the inactive threshold ran out: delete it
        sync: storage.SyncPolicy | None = None,
    ) -> None:
        self._sync = sync  # how `save_meta` makes the config durable (None: at once)
        self.stream = stream
        self.name = name
        self.cfg = cfg
        self.store = store
        self.directory = directory
        self._replies: list[str] = []  # ack_sync replies held until the acks they confirm are written
        # plain acks applied after the next delivery pass (`_on_acks`), with `next_seq` as it was then
        self._later_acks: list[tuple[list[str], int]] = []
        self._persist_armed = False
        store.set_flush_hook(self._arm_persist)
        self.created_ns = created_ns or now_ns()
        self.bus: InternalBus = stream.bus
        self.loop = self.bus.loop
        self._send = self.bus.deliver  # routes to the target; each MSG line shows the stored subject
        self.closed = False
        self._on_inactive = on_inactive
        self._ack_prefix = ack.reply_prefix(stream.name, name)
        self.pacing = push.Pacing(False, None)  # replay original / rate limit (push)
        self._configure()
        # delivery state
        self.delivery = DeliveryState()
        self.last_delivered_ns = 0
        self.last_acked_ns = 0
        # pull / push
        self.waiting = pull.WaitQueue(cfg.max_waiting, cfg.priority_policy == "prioritized") if not cfg.is_push else None
        self.priority = priority.Priority(cfg.priority_policy, cfg.priority_groups, cfg.priority_timeout)
        self.active = False
        self.flow = push.FlowControl() if cfg.flow_control else None
        self._last_out = 0  # mono ns of the last delivery (push idle heartbeat)
        self._kicked = False
        self._stall = ""  # why the last pass stopped: "eof", "max_ack_pending" or "gone" (a skip list's message)
        self._ahead: deque[StoredMsg] = deque()  # new messages read ahead in this delivery pass
        self._ahead_n = READ_AHEAD_FIRST  # how many the next read-ahead asks for
        self._out: list[Delivery] = []  # deliveries of this pass to `_out_target`, sent as one batch
        self._out_target = ""
        self._out_bytes = 0
        self._congested = False  # the receiver is backed up: this pass stops, its drain kicks the next
        self._pass_ns = self._pass_mono = 0  # the clock of the current delivery pass
        self._pass_sent = 0  # deliveries in this pass
        self._out_n = OUT_FIRST  # the size of the pass's next batch to the core
        self._pass_wait = 0  # shortest ack wait of this pass's deliveries (ns)
        self._pass_served: pull.Waiting | None = None  # a request already checked for expiry and interest
        self._pass_retained = False  # the stream hears about acks (interest/workqueue), read per pass
        self._subs = _Subs()
        self._t_ack = Timer(self.loop, self._check_pending)
        self._t_hb = Timer(self.loop, self._on_heartbeat_timer)
        self._t_inactive = Timer(self.loop, self._on_inactive_timer)
        self._t_pause = Timer(self.loop, self._kick)
        self._t_hold = Timer(self.loop, self._kick)
        self.pins = Pins(self, self._kick)
        self.pulls = PullRequests(self, self._publish, self._kick)

    def _configure(self) -> None:
        cfg = self.cfg
        self.filters = cfg.filters
        self._filter_set = frozenset(f for f in self.filters if subjects.is_literal(f))
        self._wild_filters = [f for f in self.filters if not subjects.is_literal(f)]
        self.max_deliver = max(cfg.max_deliver, 0)  # 0 is no limit
        self.max_ack_pending = cfg.max_ack_pending
        self._ack_none = cfg.ack_policy == "none"
        self._ack_all = cfg.ack_policy in ("all", "flow_control")
        self._fc_acks = cfg.ack_policy == "flow_control"  # acked by flow control responses only
        self._holds = cfg.is_push and (cfg.replay_policy == "original" or bool(cfg.rate_limit_bps))
        self.pacing.replay_original = cfg.replay_policy == "original"
        self.pacing.limiter = rate.limiter(cfg.rate_limit_bps, self.stream.config.max_msg_size, DEFAULT_MAX_PAYLOAD)
        self._headers_only = cfg.headers_only
        # sample_freq ("50%" or "50"): the share of explicit acks reported as ack metrics
        self._sample = int(cfg.sample_freq.removesuffix("%") or 0) if cfg.ack_policy == "explicit" else 0

    @property
    def ack_floor_seq(self) -> int:
        return self.delivery.ack_floor_seq

    @property
    def _interest_retention(self) -> bool:
        """Interest or workqueue retention: the stream must hear about acks (read live: a stream
        update may switch retention)."""
        return self.stream.config.retention != "limits"

    def wants(self, subject: str) -> bool:
        if not self.filters or subject in self._filter_set:
            return True
        return any(subjects.subject_matches(f, subject) for f in self._wild_filters)

    def _recount_pending(self) -> None:
        """nats-server's streamNumPending: count from the store, valid through the stream's last sequence
        (`npf`); from then on the count runs (`on_stored`, deliveries, `on_removed`) until the next recount
        (start, a filter update, a purge, a reset), and INFO only clamps it (`_checked_pending`)."""
        store = self.stream.store
        lps = self.cfg.deliver_policy == "last_per_subject"
        self.delivery.num_pending = store.num_pending(self.delivery.next_seq, self.filters or None, lps)
        self.delivery.num_pending_through = store.state().last_seq

    def _checked_pending(self) -> int:
        """nats-server's checkNumPending: never more than the messages there are from `next_seq` on."""
        st, d = self.stream.store.state(), self.delivery
        if d.next_seq > st.last_seq:
            d.num_pending = 0
        elif d.num_pending > 0:
            d.num_pending = min(d.num_pending, st.msgs, st.last_seq - d.next_seq + 1)
        return max(d.num_pending, 0)

    # ---- what the parts call of one another ----------------------------------------------------------

    @abstractmethod
    def _kick(self) -> None:
        """Schedule a delivery pass (delivery_pass.py)."""

    @abstractmethod
    def _publish(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        """Publish in order after the pass's queued deliveries (delivery_pass.py)."""

    @abstractmethod
    def _settle_acks(self) -> None:
        """Apply the plain acks waiting for a delivery pass (consumer_acks.py)."""

    @abstractmethod
    def _ack(self, stream_seq: int, delivery_seq: int, delivery_count: int = 0) -> bool:
        """Process an ack (consumer_acks.py)."""

    @abstractmethod
    def _dropped(self, dropped: Dropped) -> None:
        """A message reached max_deliver (consumer_acks.py)."""

    @abstractmethod
    def _ack_wait_for(self, seq: int) -> int:
        """The ack wait of a delivery of `seq` (consumer_acks.py)."""

    @abstractmethod
    def _arm_persist(self) -> None:
        """Write the store's buffered updates before the broker's next output (consumer_acks.py)."""

    @abstractmethod
    def _check_pending(self) -> None:
        """The ack-wait timer (consumer_acks.py)."""

    @abstractmethod
    def _send_flow_control(self, flow: push.FlowControl) -> None:
        """Ask a push subscriber for a flow control response (consumer_timers.py)."""

    @abstractmethod
    def _on_heartbeat_timer(self) -> None:
        """A push consumer's idle heartbeat (consumer_timers.py)."""

    @abstractmethod
    def _on_inactive_timer(self) -> None:
        """The inactive threshold ran out (consumer_timers.py)."""
