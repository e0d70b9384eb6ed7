"""The JetStream API errors: one table of every error jsbroker can return, and the `ApiError` exception.

Clients branch on `err_code` (nats.go and nats-py map them to typed errors), so codes and descriptions are
the ones nats-server 2.15.1 sends on the wire. Handlers raise `KIND(**fields)`, e.g.
`SEQUENCE_NOT_FOUND(seq=5)`; only `api.py` (and the publish path for pub acks) serialises them, always as
exactly `{"code", "err_code", "description"}` because nats-py builds its exception from those keys.
A description with `{placeholders}` takes them as keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass


def json_kind(value: object) -> str:
    """The JSON type name Go's decoder puts in its "cannot unmarshal <kind> into ..." error texts."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


@dataclass(frozen=True, slots=True)
class ErrorKind:
    code: int  # HTTP-like status
    err_code: int  # the NATS JetStream error code clients branch on
    description: str  # wire text; `{name}` placeholders are filled by __call__
    name: str = ""  # the module constant naming it (filled below)

    def __call__(self, **fields: object) -> ApiError:
        return ApiError(self, self.description.format(**fields) if fields else self.description)


class ApiError(Exception):
    """An error answer to a JetStream API request or a publish."""

    def __init__(self, kind: ErrorKind, description: str) -> None:
        super().__init__(description)
        self.kind = kind
        self.description = description

    @property
    def code(self) -> int:
        return self.kind.code

    @property
    def err_code(self) -> int:
        return self.kind.err_code

    def to_dict(self) -> dict[str, object]:
        return {"code": self.kind.code, "err_code": self.kind.err_code, "description": self.description}


# fmt: off
ACCOUNT_RESOURCES_EXCEEDED = ErrorKind(400, 10002, 'resource limits exceeded for account')
BAD_REQUEST = ErrorKind(400, 10003, 'bad request')
CLUSTER_NOT_AVAIL = ErrorKind(503, 10008, 'JetStream system temporarily unavailable')
CONSUMER_CREATE = ErrorKind(500, 10012, '{err}')
CONSUMER_NAME_EXIST = ErrorKind(400, 10013, 'consumer name already in use')
CONSUMER_NOT_FOUND = ErrorKind(404, 10014, 'consumer not found')
SNAPSHOT_DELIVER_SUBJECT_INVALID = ErrorKind(400, 10015, 'deliver subject not valid')
CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT = ErrorKind(400, 10016, 'consumer expected to be durable but no durable name set in subject')
CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT = ErrorKind(400, 10017, 'consumer name in subject does not match durable name in request')
CONSUMER_DURABLE_NAME_NOT_SET = ErrorKind(400, 10018, 'consumer expected to be durable but a durable name was not set')
CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT = ErrorKind(400, 10019, 'consumer expected to be ephemeral but detected a durable name set in subject')
CONSUMER_EPHEMERAL_WITH_DURABLE_NAME = ErrorKind(400, 10020, 'consumer expected to be ephemeral but a durable name was set in request')
STREAM_EXTERNAL_API_OVERLAP = ErrorKind(400, 10021, 'stream external api prefix {prefix} must not overlap with {subject}')
STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS = ErrorKind(400, 10022, 'stream external delivery prefix {prefix} overlaps with stream subject {subject}')
INSUFFICIENT_RESOURCES = ErrorKind(503, 10023, 'insufficient resources')
STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ = ErrorKind(400, 10024, 'stream external delivery prefix {prefix} must not contain wildcards')
INVALID_JSON = ErrorKind(400, 10025, 'invalid JSON: {err}')
MAXIMUM_CONSUMERS_LIMIT = ErrorKind(400, 10026, 'maximum consumers limit reached')
MAXIMUM_STREAMS_LIMIT = ErrorKind(400, 10027, 'maximum number of streams reached')
MEMORY_RESOURCES_EXCEEDED = ErrorKind(500, 10028, 'insufficient memory resources available')
MIRROR_MAX_MESSAGE_SIZE_TOO_BIG = ErrorKind(400, 10030, 'stream mirror must have max message size >= source')
MIRROR_WITH_SOURCES = ErrorKind(400, 10031, 'stream mirrors can not also contain other sources')
MIRROR_WITH_SUBJECTS = ErrorKind(400, 10034, 'stream mirrors can not contain subjects')
NO_MESSAGE_FOUND = ErrorKind(404, 10037, 'no message found')
NOT_EMPTY_REQUEST = ErrorKind(400, 10038, 'expected an empty request payload')
NOT_ENABLED_FOR_ACCOUNT = ErrorKind(503, 10039, 'JetStream not enabled for account')
SEQUENCE_NOT_FOUND = ErrorKind(400, 10043, 'sequence {seq} not found')
SOURCE_MAX_MESSAGE_SIZE_TOO_BIG = ErrorKind(400, 10046, 'stream source must have max message size >= target')
STORAGE_RESOURCES_EXCEEDED = ErrorKind(500, 10047, 'insufficient storage resources available')
STREAM_CREATE = ErrorKind(500, 10049, '{err}')
STREAM_DELETE = ErrorKind(500, 10050, '{err}')
STREAM_GENERAL_ERROR = ErrorKind(500, 10051, '{err}')
STREAM_INVALID_CONFIG = ErrorKind(500, 10052, '{err}')
STREAM_LIMITS = ErrorKind(500, 10053, '{err}')
STREAM_MESSAGE_EXCEEDS_MAXIMUM = ErrorKind(400, 10054, 'message size exceeds maximum allowed')
STREAM_MIRROR_NOT_UPDATABLE = ErrorKind(400, 10055, 'stream mirror configuration can not be updated')
STREAM_MISMATCH = ErrorKind(400, 10056, 'stream name in subject does not match request')
STREAM_MSG_DELETE_FAILED = ErrorKind(500, 10057, '{err}')
STREAM_NAME_EXIST = ErrorKind(400, 10058, 'stream name already in use with a different configuration')
STREAM_NOT_FOUND = ErrorKind(404, 10059, 'stream not found')
STREAM_NOT_MATCH = ErrorKind(400, 10060, 'expected stream does not match')
STREAM_REPLICAS_NOT_UPDATABLE = ErrorKind(400, 10061, 'Replicas configuration can not be updated')
STREAM_RESTORE = ErrorKind(500, 10062, 'restore failed: {err}')
STREAM_SNAPSHOT = ErrorKind(500, 10064, 'snapshot failed: {err}')
STREAM_SEQUENCE_NOT_MATCH = ErrorKind(503, 10063, 'expected stream sequence does not match')
STREAM_SUBJECT_OVERLAP = ErrorKind(400, 10065, 'subjects overlap with an existing stream')
STREAM_UPDATE = ErrorKind(500, 10069, '{err}')
STREAM_WRONG_LAST_MSG_ID = ErrorKind(400, 10070, 'wrong last msg ID: {id}')
STREAM_WRONG_LAST_SEQUENCE = ErrorKind(400, 10071, 'wrong last sequence: {seq}')
STREAM_REPLICAS_NOT_SUPPORTED = ErrorKind(500, 10074, 'replicas > 1 not supported in non-clustered mode')
NOT_ENABLED = ErrorKind(503, 10076, 'JetStream not enabled')
STREAM_STORE_FAILED = ErrorKind(503, 10077, '{err}')
CONSUMER_CONFIG_REQUIRED = ErrorKind(400, 10078, 'consumer config required')
CONSUMER_DELIVER_TO_WILDCARDS = ErrorKind(400, 10079, 'consumer deliver subject has wildcards')
CONSUMER_PUSH_MAX_WAITING = ErrorKind(400, 10080, 'consumer in push mode can not set max waiting')
CONSUMER_DELIVER_CYCLE = ErrorKind(400, 10081, 'consumer deliver subject forms a cycle')
CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED = ErrorKind(400, 10082, 'consumer requires ack policy for max ack pending')
CONSUMER_SMALL_HEARTBEAT = ErrorKind(400, 10083, 'consumer idle heartbeat needs to be >= 100ms')
CONSUMER_PULL_REQUIRES_ACK = ErrorKind(400, 10084, 'consumer in pull mode requires explicit ack policy on workqueue stream')
CONSUMER_PULL_NOT_DURABLE = ErrorKind(400, 10085, 'consumer in pull mode requires a durable name')
CONSUMER_PULL_WITH_RATE_LIMIT = ErrorKind(400, 10086, 'consumer in pull mode can not have rate limit set')
CONSUMER_MAX_WAITING_NEGATIVE = ErrorKind(400, 10087, 'consumer max waiting needs to be positive')
CONSUMER_HB_REQUIRES_PUSH = ErrorKind(400, 10088, 'consumer idle heartbeat requires a push based consumer')
CONSUMER_FC_REQUIRES_PUSH = ErrorKind(400, 10089, 'consumer flow control requires a push based consumer')
CONSUMER_DIRECT_REQUIRES_PUSH = ErrorKind(400, 10090, 'consumer direct requires a push based consumer')
CONSUMER_DIRECT_REQUIRES_EPHEMERAL = ErrorKind(400, 10091, 'consumer direct requires an ephemeral consumer')
CONSUMER_ON_MAPPED = ErrorKind(400, 10092, 'consumer direct on a mapped consumer')
CONSUMER_FILTER_NOT_SUBSET = ErrorKind(400, 10093, 'consumer filter subject is not a valid subset of the interest subjects')
CONSUMER_INVALID_POLICY = ErrorKind(400, 10094, '{err}')
CONSUMER_INVALID_SAMPLING = ErrorKind(400, 10095, 'failed to parse consumer sampling configuration: {err}')
STREAM_INVALID = ErrorKind(500, 10096, 'stream not valid')
STREAM_HEADER_EXCEEDS_MAXIMUM = ErrorKind(400, 10097, 'header size exceeds maximum allowed of 64k')
CONSUMER_WQ_REQUIRES_EXPLICIT_ACK = ErrorKind(400, 10098, 'workqueue stream requires explicit ack')
CONSUMER_WQ_MULTIPLE_UNFILTERED = ErrorKind(400, 10099, 'multiple non-filtered consumers not allowed on workqueue stream')
CONSUMER_WQ_CONSUMER_NOT_UNIQUE = ErrorKind(400, 10100, 'filtered consumer not unique on workqueue stream')
CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL = ErrorKind(400, 10101, 'consumer must be deliver all on workqueue stream')
CONSUMER_NAME_TOO_LONG = ErrorKind(400, 10102, 'consumer name is too long, maximum allowed is {max}')
CONSUMER_BAD_DURABLE_NAME = ErrorKind(400, 10103, "durable name can not contain '.', '*', '>'")
CONSUMER_STORE_FAILED = ErrorKind(500, 10104, 'error creating store for consumer: {err}')
CONSUMER_EXISTING_ACTIVE = ErrorKind(400, 10105, 'consumer already exists and is still active')
CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME = ErrorKind(400, 10106, 'consumer replacement durable config not the same')
CONSUMER_DESCRIPTION_TOO_LONG = ErrorKind(400, 10107, 'consumer description is too long, maximum allowed is {max}')
CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS = ErrorKind(400, 10108, 'consumer with flow control also needs heartbeats')
STREAM_SEALED = ErrorKind(400, 10109, 'invalid operation on sealed stream')
STREAM_PURGE_FAILED = ErrorKind(500, 10110, '{err}')
STREAM_ROLLUP_FAILED = ErrorKind(500, 10111, '{err}')
CONSUMER_INVALID_DELIVER_SUBJECT = ErrorKind(400, 10112, 'invalid push consumer deliver subject')
STREAM_MAX_BYTES_REQUIRED = ErrorKind(400, 10113, 'account requires a stream config to have max bytes set')
CONSUMER_MAX_REQUEST_BATCH_NEGATIVE = ErrorKind(400, 10114, 'consumer max request batch needs to be > 0')
CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL = ErrorKind(400, 10115, 'consumer max request expires needs to be >= 1ms')
CONSUMER_MAX_DELIVER_BACKOFF = ErrorKind(400, 10116, 'max deliver is required to be > length of backoff values')
CONSUMER_MAX_PENDING_ACK_EXCESS = ErrorKind(400, 10121, 'consumer max ack pending exceeds system limit of {limit}')
STREAM_MAX_STREAM_BYTES_EXCEEDED = ErrorKind(400, 10122, 'stream max bytes exceeds account limit max stream bytes')
CONSUMER_MAX_REQUEST_BATCH_EXCEEDED = ErrorKind(400, 10125, 'consumer max request batch exceeds server limit of {limit}')
CONSUMER_REPLICAS_EXCEEDS_STREAM = ErrorKind(400, 10126, 'consumer config replica count exceeds parent stream')
CONSUMER_NAME_CONTAINS_PATH_SEPARATORS = ErrorKind(400, 10127, 'Consumer name can not contain path separators')
STREAM_NAME_CONTAINS_PATH_SEPARATORS = ErrorKind(400, 10128, 'Stream name can not contain path separators')
STREAM_NAME_EXIST_RESTORE_FAILED = ErrorKind(400, 10130, 'stream name already in use, cannot restore')
CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH = ErrorKind(400, 10131, 'Consumer create request did not match filtered subject from create subject')
CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH = ErrorKind(400, 10132, 'Consumer Durable and Name have to be equal if both are provided')
REPLICAS_COUNT_CANNOT_BE_NEGATIVE = ErrorKind(400, 10133, 'replicas count cannot be negative')
CONSUMER_REPLICAS_SHOULD_MATCH_STREAM = ErrorKind(400, 10134, "consumer config replicas must match interest retention stream's replicas")
CONSUMER_METADATA_LENGTH = ErrorKind(400, 10135, 'consumer metadata exceeds maximum size of {limit}')
CONSUMER_DUPLICATE_FILTER_SUBJECTS = ErrorKind(400, 10136, 'consumer cannot have both FilterSubject and FilterSubjects specified')
CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorKind(400, 10137, 'consumer with multiple subject filters cannot use subject based API')
CONSUMER_OVERLAPPING_SUBJECT_FILTERS = ErrorKind(400, 10138, 'consumer subject filters cannot overlap')
CONSUMER_EMPTY_FILTER = ErrorKind(400, 10139, 'consumer filter in FilterSubjects cannot be empty')
SOURCE_DUPLICATE_DETECTED = ErrorKind(400, 10140, 'duplicate source configuration detected')
SOURCE_INVALID_STREAM_NAME = ErrorKind(400, 10141, 'sourced stream name is invalid')
MIRROR_INVALID_STREAM_NAME = ErrorKind(400, 10142, 'mirrored stream name is invalid')
MIRROR_WITH_FIRST_SEQ = ErrorKind(400, 10143, 'stream mirrors can not have first sequence configured')
SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorKind(400, 10144, 'source with multiple subject transforms cannot also have a single subject filter')
SOURCE_INVALID_SUBJECT_FILTER = ErrorKind(400, 10145, 'source transform source: {err}')
SOURCE_INVALID_TRANSFORM_DESTINATION = ErrorKind(400, 10146, 'source transform: {err}')
SOURCE_OVERLAPPING_SUBJECT_FILTERS = ErrorKind(400, 10147, 'source filters can not overlap')
CONSUMER_ALREADY_EXISTS = ErrorKind(400, 10148, 'consumer already exists')
CONSUMER_DOES_NOT_EXIST = ErrorKind(400, 10149, 'consumer does not exist')
MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED = ErrorKind(400, 10150, 'mirror with multiple subject transforms cannot also have a single subject filter')
MIRROR_INVALID_SUBJECT_FILTER = ErrorKind(400, 10151, 'mirror transform source: {err}')
MIRROR_OVERLAPPING_SUBJECT_FILTERS = ErrorKind(400, 10152, 'mirror subject filters can not overlap')
MIRROR_INVALID_TRANSFORM_DESTINATION = ErrorKind(400, 10154, 'mirror transform: {err}')
CONSUMER_INACTIVE_THRESHOLD_EXCESS = ErrorKind(400, 10153, 'consumer inactive threshold exceeds system limit of {limit}')
STREAM_TRANSFORM_INVALID_SOURCE = ErrorKind(400, 10155, 'stream transform source: {err}')
STREAM_TRANSFORM_INVALID_DESTINATION = ErrorKind(400, 10156, 'stream transform: {err}')
PEDANTIC = ErrorKind(400, 10157, 'pedantic mode: {err}')
STREAM_DUPLICATE_MESSAGE_CONFLICT = ErrorKind(409, 10158, 'duplicate message id is in process')
CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP = ErrorKind(400, 10159, 'Setting PriorityPolicy requires at least one PriorityGroup to be set')
CONSUMER_INVALID_PRIORITY_GROUP = ErrorKind(400, 10160, 'Provided priority group does not exist for this consumer')
CONSUMER_EMPTY_GROUP_NAME = ErrorKind(400, 10161, 'Group name cannot be an empty string')
CONSUMER_INVALID_GROUP_NAME = ErrorKind(400, 10162, 'Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters')
STREAM_WRONG_LAST_SEQUENCE_CONSTANT = ErrorKind(400, 10164, 'wrong last sequence')
MESSAGE_TTL_INVALID = ErrorKind(400, 10165, 'invalid per-message TTL')
MESSAGE_TTL_DISABLED = ErrorKind(400, 10166, 'per-message TTL is disabled')
STREAM_TOO_MANY_REQUESTS = ErrorKind(429, 10167, 'too many requests')
MESSAGE_INCR_DISABLED = ErrorKind(400, 10168, 'message counters is disabled')
MESSAGE_INCR_MISSING = ErrorKind(400, 10169, 'message counter increment is missing')
MESSAGE_INCR_PAYLOAD = ErrorKind(400, 10170, 'message counter has payload')
MESSAGE_INCR_INVALID = ErrorKind(400, 10171, 'message counter increment is invalid')
MESSAGE_COUNTER_BROKEN = ErrorKind(400, 10172, 'message counter is broken')
MIRROR_WITH_COUNTERS = ErrorKind(400, 10173, 'stream mirrors can not also calculate counters')
ATOMIC_PUBLISH_DISABLED = ErrorKind(400, 10174, 'atomic publish is disabled')
ATOMIC_PUBLISH_MISSING_SEQ = ErrorKind(400, 10175, 'atomic publish sequence is missing')
ATOMIC_PUBLISH_INCOMPLETE_BATCH = ErrorKind(400, 10176, 'atomic publish batch is incomplete')
ATOMIC_PUBLISH_UNSUPPORTED_HEADER = ErrorKind(400, 10177, 'atomic publish unsupported header used: {header}')
CONSUMER_PUSH_WITH_PRIORITY_GROUP = ErrorKind(400, 10178, 'priority groups can not be used with push consumers')
ATOMIC_PUBLISH_INVALID_BATCH_ID = ErrorKind(400, 10179, 'atomic publish batch ID is invalid')
CONSUMER_ACK_POLICY_INVALID = ErrorKind(400, 10181, 'consumer ack policy invalid')
CONSUMER_REPLAY_POLICY_INVALID = ErrorKind(400, 10182, 'consumer replay policy invalid')
CONSUMER_ACK_WAIT_NEGATIVE = ErrorKind(400, 10183, 'consumer ack wait needs to be positive')
CONSUMER_BACKOFF_NEGATIVE = ErrorKind(400, 10184, 'consumer backoff needs to be positive')
REQUIRED_API_LEVEL = ErrorKind(412, 10185, 'JetStream minimum api level required')
MIRROR_WITH_MSG_SCHEDULES = ErrorKind(400, 10186, 'stream mirrors can not also schedule messages')
SOURCE_WITH_MSG_SCHEDULES = ErrorKind(400, 10187, 'stream source can not also schedule messages')
MESSAGE_SCHEDULES_DISABLED = ErrorKind(400, 10188, 'message schedules is disabled')
MESSAGE_SCHEDULES_PATTERN_INVALID = ErrorKind(400, 10189, 'message schedules pattern is invalid')
MESSAGE_SCHEDULES_TARGET_INVALID = ErrorKind(400, 10190, 'message schedules target is invalid')
MESSAGE_SCHEDULES_TTL_INVALID = ErrorKind(400, 10191, 'message schedules invalid per-message TTL')
MESSAGE_SCHEDULES_ROLLUP_INVALID = ErrorKind(400, 10192, 'message schedules invalid rollup')
STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID = ErrorKind(400, 10193, 'missing sequence for expected last sequence per subject')
CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE = ErrorKind(400, 10196, 'consumer can not have priority groups when policy is none')
CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE = ErrorKind(400, 10197, 'PinnedTTL cannot be set when PriorityPolicy is none')
MIRROR_WITH_ATOMIC_PUBLISH = ErrorKind(400, 10198, 'stream mirrors can not also use atomic publishing')
ATOMIC_PUBLISH_TOO_LARGE_BATCH = ErrorKind(400, 10199, 'atomic publish batch is too large: {size}')
ATOMIC_PUBLISH_INVALID_BATCH_COMMIT = ErrorKind(400, 10200, 'atomic publish batch commit is invalid')
ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE = ErrorKind(400, 10201, 'atomic publish batch contains duplicate message id')
MESSAGE_SCHEDULES_SOURCE_INVALID = ErrorKind(400, 10203, 'message schedules source is invalid')
CONSUMER_INVALID_RESET = ErrorKind(400, 10204, 'invalid reset: {err}')
BATCH_PUBLISH_DISABLED = ErrorKind(400, 10205, 'batch publish is disabled')
BATCH_PUBLISH_INVALID_PATTERN = ErrorKind(400, 10206, 'batch publish pattern is invalid')
BATCH_PUBLISH_INVALID_BATCH_ID = ErrorKind(400, 10207, 'batch publish ID is invalid')
BATCH_PUBLISH_UNKNOWN_BATCH_ID = ErrorKind(400, 10208, 'batch publish ID unknown')
MIRROR_WITH_BATCH_PUBLISH = ErrorKind(400, 10209, 'stream mirrors can not also use batch publishing')
ATOMIC_PUBLISH_TOO_MANY_INFLIGHT = ErrorKind(429, 10210, 'atomic publish too many inflight')
BATCH_PUBLISH_TOO_MANY_INFLIGHT = ErrorKind(429, 10211, 'batch publish too many inflight')
MESSAGE_SCHEDULES_SCHEDULER_INVALID = ErrorKind(400, 10212, 'message schedules invalid scheduler')
MIRROR_DURABLE_CONSUMER_CFG_INVALID = ErrorKind(400, 10213, 'stream mirror consumer config is invalid')
MIRROR_CONSUMER_REQUIRES_ACK_FC = ErrorKind(400, 10214, 'stream mirror consumer requires flow control ack policy')
SOURCE_DURABLE_CONSUMER_CFG_INVALID = ErrorKind(400, 10215, 'stream source consumer config is invalid')
SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED = ErrorKind(400, 10216, 'duplicate stream source consumer detected')
SOURCE_CONSUMER_REQUIRES_ACK_FC = ErrorKind(400, 10217, 'stream source consumer requires flow control ack policy')
CONSUMER_ACK_FC_REQUIRES_PUSH = ErrorKind(400, 10218, 'flow control ack policy requires a push based consumer')
CONSUMER_ACK_FC_REQUIRES_FC = ErrorKind(400, 10219, 'flow control ack policy requires flow control')
CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING = ErrorKind(400, 10220, 'flow control ack policy requires max ack pending')
CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT = ErrorKind(400, 10221, 'flow control ack policy requires unset ack wait')
CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER = ErrorKind(400, 10222, 'flow control ack policy requires unset max deliver')
MESSAGE_SCHEDULES_TIME_ZONE_INVALID = ErrorKind(400, 10223, 'message schedules time zone is invalid')
MESSAGE_SOURCE_HDR_NOT_ALLOWED = ErrorKind(400, 10227, 'message stream source header is not allowed')
# fmt: on

ALL: tuple[ErrorKind, ...] = tuple(v for v in globals().values() if isinstance(v, ErrorKind))
for _name, _value in list(globals().items()):
    if isinstance(_value, ErrorKind):
        object.__setattr__(_value, "name", _name)
BY_ERR_CODE: dict[int, ErrorKind] = {kind.err_code: kind for kind in ALL}
