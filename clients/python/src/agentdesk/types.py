"""Types of the agentdesk API, generated from openapi/openapi.json by
scripts/generate_types.py. Do not edit by hand: run clients/generate.sh."""
# fmt: off
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional


def _list(build: Any, value: Any) -> Any:
    return None if value is None else [build(v) for v in value]


def _opt(build: Any, value: Any) -> Any:
    return None if value is None else build(value)


A2aTaskState = Literal["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED", "TASK_STATE_AUTH_REQUIRED", "TASK_STATE_UNSPECIFIED"]

Author = Literal["user", "assistant", "system"]

CatchUp = Literal["skip", "latest"]

ExperimentStatus = Literal["running", "done", "cancelled"]

HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]

McpAccept = Literal["application/json, text/event-stream"]

McpProtocolVersion = Literal["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]

McpSessionProtocolVersion = Literal["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]

McpStreamAccept = Literal["text/event-stream"]

OnTimeout = Literal["deny", "approve", "fail"]

Overlap = Literal["skip", "allow", "cancel_previous"]

PriceSource = Literal["desk", "built_in"]

ProviderKind = Literal["openai", "anthropic"]

QuestionTimeout = Literal["fail", "continue"]

ReplayTools = Literal["recorded", "live"]

RequeueReason = Literal["lease_lost", "shutdown", "comment", "retry", "approval", "budget"]

Status = Literal["todo", "in_progress", "waiting", "done", "failed", "cancelled"]

TokenScope = Literal["read", "write", "approve", "admin"]

WaitingFor = Literal["human", "approval", "budget", "price"]

EventKind = Literal["ticket.created", "ticket.started", "ticket.done", "ticket.failed", "ticket.cancelled", "ticket.waiting", "ticket.requeued", "ticket.updated", "comment.created", "request.started", "request.finished", "request.retried", "request.failed", "request.queued", "tool.started", "tool.finished", "tool.failed", "tool.approval_requested", "tool.approval_expired", "tool.approved", "tool.denied", "question.asked", "question.answered", "question.expired", "tool.replay_mismatch", "schema.retried", "policy.violated", "compaction.started", "compaction.finished", "compaction.failed", "context.limit_exceeded", "budget.exhausted", "budget.threshold", "budget.unpriced", "schedule.skipped", "project.quota_reached", "text.delta", "thinking.delta", "tool_call.delta"]
"""Every event kind the document names (a desk may send newer ones)."""

EVENT_KINDS = (
    "ticket.created",
    "ticket.started",
    "ticket.done",
    "ticket.failed",
    "ticket.cancelled",
    "ticket.waiting",
    "ticket.requeued",
    "ticket.updated",
    "comment.created",
    "request.started",
    "request.finished",
    "request.retried",
    "request.failed",
    "request.queued",
    "tool.started",
    "tool.finished",
    "tool.failed",
    "tool.approval_requested",
    "tool.approval_expired",
    "tool.approved",
    "tool.denied",
    "question.asked",
    "question.answered",
    "question.expired",
    "tool.replay_mismatch",
    "schema.retried",
    "policy.violated",
    "compaction.started",
    "compaction.finished",
    "compaction.failed",
    "context.limit_exceeded",
    "budget.exhausted",
    "budget.threshold",
    "budget.unpriced",
    "schedule.skipped",
    "project.quota_reached",
    "text.delta",
    "thinking.delta",
    "tool_call.delta",
)


@dataclass
class A2aJsonRpcRequest:
    """A JSON-RPC 2.0 request of A2A: `params` is the method's request message (SendMessageRequest for the sending methods; `{id, historyLength}` for GetTask, `{id}` for CancelTask and SubscribeToTask; ListTasksRequest's fields for ListTasks)."""

    jsonrpc: Any
    id: Any
    method: Any
    params: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aJsonRpcRequest:
        return cls(
            jsonrpc=d['jsonrpc'],
            id=d['id'],
            method=d['method'],
            params=d.get('params'),
            raw=d,
        )


@dataclass
class A2aListTasksResponse:
    tasks: List[A2aTask]
    nextPageToken: str
    pageSize: int
    totalSize: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aListTasksResponse:
        return cls(
            tasks=_list(A2aTask.from_json, d['tasks']),
            nextPageToken=d['nextPageToken'],
            pageSize=d['pageSize'],
            totalSize=d['totalSize'],
            raw=d,
        )


@dataclass
class A2aMessage:
    messageId: str
    role: Any
    parts: List[A2aPart]
    contextId: Optional[str] = None
    taskId: Optional[str] = None
    metadata: Any = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aMessage:
        return cls(
            messageId=d['messageId'],
            role=d['role'],
            parts=_list(A2aPart.from_json, d['parts']),
            contextId=d.get('contextId'),
            taskId=d.get('taskId'),
            metadata=d.get('metadata'),
            raw=d,
        )


@dataclass
class A2aPart:
    """One part of a message: `text`, or `data` (any JSON); `url` and `raw` (file parts) are kept but not read as the task. A null field is an absent one."""

    text: Optional[str] = None
    data: Any = None
    url: Optional[str] = None
    raw_: Optional[str] = None
    mediaType: Optional[str] = None
    filename: Optional[str] = None
    metadata: Any = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aPart:
        return cls(
            text=d.get('text'),
            data=d.get('data'),
            url=d.get('url'),
            raw_=d.get('raw'),
            mediaType=d.get('mediaType'),
            filename=d.get('filename'),
            metadata=d.get('metadata'),
            raw=d,
        )


@dataclass
class A2aSendMessageRequest:
    message: Any
    configuration: Any = None
    metadata: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aSendMessageRequest:
        return cls(
            message=d['message'],
            configuration=d.get('configuration'),
            metadata=d.get('metadata'),
            raw=d,
        )


@dataclass
class A2aSendMessageResponse:
    task: A2aTask
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aSendMessageResponse:
        return cls(
            task=A2aTask.from_json(d['task']),
            raw=d,
        )


@dataclass
class A2aStatus:
    """An A2A error of the HTTP+JSON binding: a google.rpc.Status whose `details` hold a google.rpc.ErrorInfo naming the error (`reason`: TASK_NOT_FOUND, TASK_NOT_CANCELABLE, INVALID_PARAMS, PARSE_ERROR, VERSION_NOT_SUPPORTED, …)."""

    error: Dict[str, Any]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aStatus:
        return cls(
            error=d['error'],
            raw=d,
        )


@dataclass
class A2aStreamEvent:
    """One server-sent event: `data` is the JSON text of a StreamResponse (`{"task"}`, `{"statusUpdate"}` or `{"artifactUpdate"}`); `: ping` comments carry nothing."""

    data: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aStreamEvent:
        return cls(
            data=d.get('data'),
            raw=d,
        )


@dataclass
class A2aTask:
    id: str
    contextId: str
    status: Dict[str, Any]
    artifacts: Optional[List[Dict[str, Any]]] = None
    history: Optional[List[Dict[str, Any]]] = None
    metadata: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> A2aTask:
        return cls(
            id=d['id'],
            contextId=d['contextId'],
            status=d['status'],
            artifacts=d.get('artifacts'),
            history=d.get('history'),
            metadata=d.get('metadata'),
            raw=d,
        )


@dataclass
class Agent:
    name: str
    role: str
    model: str
    labels: List[str]
    tools: List[str]
    max_schema_retries: int
    max_request_retries: int
    request_retry_delay_ms: int
    budget_usd_per_day: Optional[float]
    approval_timeout_secs: Optional[int]
    on_timeout: Optional[OnTimeout]
    question_timeout_secs: Optional[int]
    on_question_timeout: Optional[QuestionTimeout]
    created_at: str
    updated_at: str
    provider: Optional[str] = None
    context_window: Optional[int] = None
    max_turns: Optional[int] = None
    max_input_tokens: Optional[int] = None
    max_output_tokens: Optional[int] = None
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None
    thinking_budget: Optional[int] = None
    tool_choice: Optional[str] = None
    max_concurrent: Optional[int] = None
    version: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Agent:
        return cls(
            name=d['name'],
            role=d['role'],
            model=d['model'],
            labels=d['labels'],
            tools=d['tools'],
            max_schema_retries=d['max_schema_retries'],
            max_request_retries=d['max_request_retries'],
            request_retry_delay_ms=d['request_retry_delay_ms'],
            budget_usd_per_day=d['budget_usd_per_day'],
            approval_timeout_secs=d['approval_timeout_secs'],
            on_timeout=d['on_timeout'],
            question_timeout_secs=d['question_timeout_secs'],
            on_question_timeout=d['on_question_timeout'],
            created_at=d['created_at'],
            updated_at=d['updated_at'],
            provider=d.get('provider'),
            context_window=d.get('context_window'),
            max_turns=d.get('max_turns'),
            max_input_tokens=d.get('max_input_tokens'),
            max_output_tokens=d.get('max_output_tokens'),
            temperature=d.get('temperature'),
            max_tokens=d.get('max_tokens'),
            thinking_budget=d.get('thinking_budget'),
            tool_choice=d.get('tool_choice'),
            max_concurrent=d.get('max_concurrent'),
            version=d.get('version'),
            raw=d,
        )


@dataclass
class AgentList:
    items: List[Agent]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> AgentList:
        return cls(
            items=_list(Agent.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class AnswerApproval:
    approve: bool
    reason: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> AnswerApproval:
        return cls(
            approve=d['approve'],
            reason=d.get('reason'),
            raw=d,
        )


@dataclass
class AnswerApprovals:
    """Exactly one of `decisions`, `approve_all` and `deny_all`."""

    decisions: Optional[List[ApprovalDecision]] = None
    approve_all: Optional[bool] = None
    deny_all: Optional[bool] = None
    reason: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> AnswerApprovals:
        return cls(
            decisions=_list(ApprovalDecision.from_json, d.get('decisions')),
            approve_all=d.get('approve_all'),
            deny_all=d.get('deny_all'),
            reason=d.get('reason'),
            raw=d,
        )


@dataclass
class AnswerQuestion:
    answer: Any
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> AnswerQuestion:
        return cls(
            answer=d['answer'],
            raw=d,
        )


@dataclass
class ApprovalDecision:
    call_id: str
    approve: bool
    reason: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ApprovalDecision:
        return cls(
            call_id=d['call_id'],
            approve=d['approve'],
            reason=d.get('reason'),
            raw=d,
        )


@dataclass
class Arm:
    """One way of running the tickets."""

    name: str
    agent: Optional[str] = None
    agent_version: Optional[int] = None
    provider: Optional[str] = None
    model: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Arm:
        return cls(
            name=d['name'],
            agent=d.get('agent'),
            agent_version=d.get('agent_version'),
            provider=d.get('provider'),
            model=d.get('model'),
            raw=d,
        )


@dataclass
class ArmFigures:
    """An arm's settings and figures, read from its replays."""

    name: str
    done: int
    failed: int
    waiting: int
    cost_usd: Any
    input_tokens: int
    output_tokens: int
    duration_ms: Percentiles
    agent: Optional[str] = None
    agent_version: Optional[int] = None
    provider: Optional[str] = None
    model: Optional[str] = None
    schema_valid: Optional[float] = None
    judge: Optional[JudgeFigures] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ArmFigures:
        return cls(
            name=d['name'],
            done=d['done'],
            failed=d['failed'],
            waiting=d['waiting'],
            cost_usd=d['cost_usd'],
            input_tokens=d['input_tokens'],
            output_tokens=d['output_tokens'],
            duration_ms=Percentiles.from_json(d['duration_ms']),
            agent=d.get('agent'),
            agent_version=d.get('agent_version'),
            provider=d.get('provider'),
            model=d.get('model'),
            schema_valid=d.get('schema_valid'),
            judge=_opt(JudgeFigures.from_json, d.get('judge')),
            raw=d,
        )


@dataclass
class ArmResult:
    key: str
    status: Status
    result: Any = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ArmResult:
        return cls(
            key=d['key'],
            status=d['status'],
            result=d.get('result'),
            raw=d,
        )


@dataclass
class Comment:
    id: str
    ticket_id: str
    seq: int
    author: Author
    content: List[Any]
    created_at: str
    agent: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Comment:
        return cls(
            id=d['id'],
            ticket_id=d['ticket_id'],
            seq=d['seq'],
            author=d['author'],
            content=d['content'],
            created_at=d['created_at'],
            agent=d.get('agent'),
            raw=d,
        )


@dataclass
class CommentList:
    items: List[Comment]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CommentList:
        return cls(
            items=_list(Comment.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class CreateComment:
    text: str
    author: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreateComment:
        return cls(
            text=d['text'],
            author=d.get('author'),
            raw=d,
        )


@dataclass
class CreateExperiment:
    name: str
    arms: List[Arm]
    tickets: Optional[List[str]] = None
    filter: Optional[ExperimentFilter] = None
    judge: Optional[JudgeSpec] = None
    tools: Optional[ReplayTools] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreateExperiment:
        return cls(
            name=d['name'],
            arms=_list(Arm.from_json, d['arms']),
            tickets=d.get('tickets'),
            filter=_opt(ExperimentFilter.from_json, d.get('filter')),
            judge=_opt(JudgeSpec.from_json, d.get('judge')),
            tools=d.get('tools'),
            raw=d,
        )


@dataclass
class CreateProject:
    name: str
    key_prefix: str
    description: Optional[str] = None
    weight: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    quotas: Optional[Quotas] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreateProject:
        return cls(
            name=d['name'],
            key_prefix=d['key_prefix'],
            description=d.get('description'),
            weight=d.get('weight'),
            rate_limit=_opt(RateLimit.from_json, d.get('rate_limit')),
            quotas=_opt(Quotas.from_json, d.get('quotas')),
            raw=d,
        )


@dataclass
class CreateSchedule:
    """A new schedule."""

    cron: str
    ticket: TicketTemplateBody
    name: Optional[str] = None
    timezone: Optional[str] = None
    enabled: Optional[bool] = None
    start_at: Optional[str] = None
    end_at: Optional[str] = None
    overlap: Optional[Overlap] = None
    catch_up: Optional[CatchUp] = None
    catch_up_window_secs: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreateSchedule:
        return cls(
            cron=d['cron'],
            ticket=TicketTemplateBody.from_json(d['ticket']),
            name=d.get('name'),
            timezone=d.get('timezone'),
            enabled=d.get('enabled'),
            start_at=d.get('start_at'),
            end_at=d.get('end_at'),
            overlap=d.get('overlap'),
            catch_up=d.get('catch_up'),
            catch_up_window_secs=d.get('catch_up_window_secs'),
            raw=d,
        )


@dataclass
class CreateTicket:
    task: Any
    labels: Optional[List[str]] = None
    priority: Optional[int] = None
    schema: Any = None
    parent: Optional[str] = None
    metadata: Optional[Dict[str, Any]] = None
    max_attempts: Optional[int] = None
    deadline_secs: Optional[int] = None
    budget_usd: Optional[float] = None
    agent: Optional[str] = None
    agent_version: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreateTicket:
        return cls(
            task=d['task'],
            labels=d.get('labels'),
            priority=d.get('priority'),
            schema=d.get('schema'),
            parent=d.get('parent'),
            metadata=d.get('metadata'),
            max_attempts=d.get('max_attempts'),
            deadline_secs=d.get('deadline_secs'),
            budget_usd=d.get('budget_usd'),
            agent=d.get('agent'),
            agent_version=d.get('agent_version'),
            raw=d,
        )


@dataclass
class CreateToken:
    name: str
    scopes: List[TokenScope]
    expires_at: Optional[str] = None
    rate_limit: Optional[RateLimit] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreateToken:
        return cls(
            name=d['name'],
            scopes=d['scopes'],
            expires_at=d.get('expires_at'),
            rate_limit=_opt(RateLimit.from_json, d.get('rate_limit')),
            raw=d,
        )


@dataclass
class CreateWebhook:
    url: str
    events: Optional[List[str]] = None
    labels: Optional[List[str]] = None
    secret: Optional[str] = None
    description: Optional[str] = None
    disabled: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreateWebhook:
        return cls(
            url=d['url'],
            events=d.get('events'),
            labels=d.get('labels'),
            secret=d.get('secret'),
            description=d.get('description'),
            disabled=d.get('disabled'),
            raw=d,
        )


@dataclass
class CreatedToken:
    """A new token, with its secret: shown only in this answer."""

    id: str
    name: str
    scopes: List[TokenScope]
    created_at: str
    token: str
    expires_at: Optional[str] = None
    rate_limit: Optional[RateLimit] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> CreatedToken:
        return cls(
            id=d['id'],
            name=d['name'],
            scopes=d['scopes'],
            created_at=d['created_at'],
            token=d['token'],
            expires_at=d.get('expires_at'),
            rate_limit=_opt(RateLimit.from_json, d.get('rate_limit')),
            raw=d,
        )


@dataclass
class Delivery:
    """One attempt to deliver an event to an endpoint."""

    event_id: str
    type: str
    attempt: int
    duration_ms: int
    at: str
    status_code: Optional[int] = None
    error: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Delivery:
        return cls(
            event_id=d['event_id'],
            type=d['type'],
            attempt=d['attempt'],
            duration_ms=d['duration_ms'],
            at=d['at'],
            status_code=d.get('status_code'),
            error=d.get('error'),
            raw=d,
        )


@dataclass
class DeliveryList:
    items: List[Delivery]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> DeliveryList:
        return cls(
            items=_list(Delivery.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class ErrorBody:
    error: ErrorDetail
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ErrorBody:
        return cls(
            error=ErrorDetail.from_json(d['error']),
            raw=d,
        )


@dataclass
class ErrorDetail:
    code: str
    message: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ErrorDetail:
        return cls(
            code=d['code'],
            message=d['message'],
            raw=d,
        )


@dataclass
class Experiment:
    """An experiment as the API shows it."""

    id: str
    name: str
    status: ExperimentStatus
    cost_usd: Any
    tools: ReplayTools
    arms: List[ArmFigures]
    tickets: List[ExperimentTicket]
    created_at: str
    judge: Optional[JudgeSpec] = None
    finished_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Experiment:
        return cls(
            id=d['id'],
            name=d['name'],
            status=d['status'],
            cost_usd=d['cost_usd'],
            tools=d['tools'],
            arms=_list(ArmFigures.from_json, d['arms']),
            tickets=_list(ExperimentTicket.from_json, d['tickets']),
            created_at=d['created_at'],
            judge=_opt(JudgeSpec.from_json, d.get('judge')),
            finished_at=d.get('finished_at'),
            raw=d,
        )


@dataclass
class ExperimentFilter:
    label: Optional[str] = None
    status: Optional[Status] = None
    since: Optional[str] = None
    limit: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ExperimentFilter:
        return cls(
            label=d.get('label'),
            status=d.get('status'),
            since=d.get('since'),
            limit=d.get('limit'),
            raw=d,
        )


@dataclass
class ExperimentList:
    items: List[Experiment]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ExperimentList:
        return cls(
            items=_list(Experiment.from_json, d['items']),
            raw=d,
        )


@dataclass
class ExperimentTicket:
    ticket: str
    results: Dict[str, ArmResult]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ExperimentTicket:
        return cls(
            ticket=d['ticket'],
            results=d['results'],
            raw=d,
        )


@dataclass
class Figures:
    by_status: StatusCounts
    requests: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    success_rate: float
    avg_ticket_ms: float
    avg_work_ms: float
    cost_usd: float
    unpriced_tickets: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Figures:
        return cls(
            by_status=StatusCounts.from_json(d['by_status']),
            requests=d['requests'],
            tool_calls=d['tool_calls'],
            input_tokens=d['input_tokens'],
            output_tokens=d['output_tokens'],
            success_rate=d['success_rate'],
            avg_ticket_ms=d['avg_ticket_ms'],
            avg_work_ms=d['avg_work_ms'],
            cost_usd=d['cost_usd'],
            unpriced_tickets=d['unpriced_tickets'],
            raw=d,
        )


@dataclass
class HttpToolDef:
    """An HTTP tool as defined with `PUT /v1/tools/{name}`. Secrets stay templates (`${env:NAME}`)."""

    name: str
    description: str
    input_schema: Dict[str, Any]
    url: str
    method: HttpMethod
    headers: Dict[str, str]
    timeout_ms: int
    requires_approval: bool
    approval_timeout_secs: Optional[int]
    on_timeout: Optional[OnTimeout]
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> HttpToolDef:
        return cls(
            name=d['name'],
            description=d['description'],
            input_schema=d['input_schema'],
            url=d['url'],
            method=d['method'],
            headers=d['headers'],
            timeout_ms=d['timeout_ms'],
            requires_approval=d['requires_approval'],
            approval_timeout_secs=d['approval_timeout_secs'],
            on_timeout=d['on_timeout'],
            created_at=d.get('created_at'),
            updated_at=d.get('updated_at'),
            raw=d,
        )


@dataclass
class JsonRpcErrorObject:
    code: int
    message: str
    data: Any = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> JsonRpcErrorObject:
        return cls(
            code=d['code'],
            message=d['message'],
            data=d.get('data'),
            raw=d,
        )


@dataclass
class JsonRpcResponse:
    """A JSON-RPC 2.0 response: `result`, or `error` (sent with HTTP 200)."""

    jsonrpc: Any
    id: Any = None
    result: Any = None
    error: Optional[JsonRpcErrorObject] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> JsonRpcResponse:
        return cls(
            jsonrpc=d['jsonrpc'],
            id=d.get('id'),
            result=d.get('result'),
            error=_opt(JsonRpcErrorObject.from_json, d.get('error')),
            raw=d,
        )


@dataclass
class JudgeFigures:
    wins: int
    losses: int
    ties: int
    mean_score: Optional[float] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> JudgeFigures:
        return cls(
            wins=d['wins'],
            losses=d['losses'],
            ties=d['ties'],
            mean_score=d.get('mean_score'),
            raw=d,
        )


@dataclass
class JudgeSpec:
    """The judge: an agent that gets the task and the arms' results in random order, without the
arms' names, and answers through `judge_schema`."""

    agent: str
    criteria: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> JudgeSpec:
        return cls(
            agent=d['agent'],
            criteria=d.get('criteria'),
            raw=d,
        )


@dataclass
class McpServerList:
    items: List[McpServerView]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> McpServerList:
        return cls(
            items=_list(McpServerView.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class McpServerView:
    """What the API shows of a server."""

    name: str
    headers: Dict[str, str]
    timeout_ms: int
    requires_approval: Any
    source: str
    tools: List[McpToolInfo]
    status: str
    url: Optional[str] = None
    command: Optional[str] = None
    args: Optional[List[str]] = None
    approval_timeout_secs: Optional[int] = None
    on_timeout: Optional[OnTimeout] = None
    listed_at: Optional[str] = None
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> McpServerView:
        return cls(
            name=d['name'],
            headers=d['headers'],
            timeout_ms=d['timeout_ms'],
            requires_approval=d['requires_approval'],
            source=d['source'],
            tools=_list(McpToolInfo.from_json, d['tools']),
            status=d['status'],
            url=d.get('url'),
            command=d.get('command'),
            args=d.get('args'),
            approval_timeout_secs=d.get('approval_timeout_secs'),
            on_timeout=d.get('on_timeout'),
            listed_at=d.get('listed_at'),
            created_at=d.get('created_at'),
            updated_at=d.get('updated_at'),
            raw=d,
        )


@dataclass
class McpToolInfo:
    """A tool as the server last listed it."""

    name: str
    qualified_name: str
    description: str
    input_schema: Dict[str, Any]
    requires_approval: bool
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> McpToolInfo:
        return cls(
            name=d['name'],
            qualified_name=d['qualified_name'],
            description=d['description'],
            input_schema=d['input_schema'],
            requires_approval=d['requires_approval'],
            raw=d,
        )


@dataclass
class ModelFigures:
    """One model's figures in `by_model`: the usage of the tickets whose agent ran it."""

    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ModelFigures:
        return cls(
            requests=d['requests'],
            input_tokens=d['input_tokens'],
            output_tokens=d['output_tokens'],
            cost_usd=d['cost_usd'],
            raw=d,
        )


@dataclass
class PatchProject:
    """Changes a project: fields left out stay; `rate_limit` null removes the limit. The name and
key prefix never change (they are in every key and in clients' configuration)."""

    description: Optional[str] = None
    weight: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    quotas: Optional[Quotas] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PatchProject:
        return cls(
            description=d.get('description'),
            weight=d.get('weight'),
            rate_limit=_opt(RateLimit.from_json, d.get('rate_limit')),
            quotas=_opt(Quotas.from_json, d.get('quotas')),
            raw=d,
        )


@dataclass
class PatchSchedule:
    """Changes to a schedule: what the body names. `ticket` keys replace the template's keys of the
same name. A change of `cron`, `timezone`, `start_at`, `end_at` or `enabled` recomputes
`next_run_at` from now (times missed while paused do not fire)."""

    name: Optional[str] = None
    cron: Optional[str] = None
    timezone: Optional[str] = None
    ticket: Optional[Dict[str, Any]] = None
    enabled: Optional[bool] = None
    start_at: Optional[str] = None
    end_at: Optional[str] = None
    overlap: Optional[Overlap] = None
    catch_up: Optional[CatchUp] = None
    catch_up_window_secs: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PatchSchedule:
        return cls(
            name=d.get('name'),
            cron=d.get('cron'),
            timezone=d.get('timezone'),
            ticket=d.get('ticket'),
            enabled=d.get('enabled'),
            start_at=d.get('start_at'),
            end_at=d.get('end_at'),
            overlap=d.get('overlap'),
            catch_up=d.get('catch_up'),
            catch_up_window_secs=d.get('catch_up_window_secs'),
            raw=d,
        )


@dataclass
class PatchTicket:
    """Only these fields may change: a status changes through cancel, retry and comments, so a
body that names another field is refused (422) rather than answered as if it had applied."""

    task: Any = None
    labels: Optional[List[str]] = None
    priority: Optional[int] = None
    schema: Optional[Dict[str, Any]] = None
    metadata: Optional[Dict[str, Any]] = None
    budget_usd: Optional[float] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PatchTicket:
        return cls(
            task=d.get('task'),
            labels=d.get('labels'),
            priority=d.get('priority'),
            schema=d.get('schema'),
            metadata=d.get('metadata'),
            budget_usd=d.get('budget_usd'),
            raw=d,
        )


@dataclass
class PatchWebhook:
    """The secret is not among what a PATCH changes (it is shown once, when created): a body that
names it, or any other field, is refused (422) rather than answered as if it had applied."""

    url: Optional[str] = None
    events: Optional[List[str]] = None
    labels: Optional[List[str]] = None
    description: Optional[str] = None
    disabled: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PatchWebhook:
        return cls(
            url=d.get('url'),
            events=d.get('events'),
            labels=d.get('labels'),
            description=d.get('description'),
            disabled=d.get('disabled'),
            raw=d,
        )


@dataclass
class PendingApproval:
    """A call that waits for a person, as a ticket shows it."""

    call_id: str
    tool_name: str
    input: Dict[str, Any]
    approve_url: Optional[str]
    deny_url: Optional[str]
    expires_at: Optional[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PendingApproval:
        return cls(
            call_id=d['call_id'],
            tool_name=d['tool_name'],
            input=d['input'],
            approve_url=d['approve_url'],
            deny_url=d['deny_url'],
            expires_at=d['expires_at'],
            raw=d,
        )


@dataclass
class PendingQuestion:
    """A question that waits for an answer, as a ticket shows it (`pending_question`)."""

    id: str
    question: str
    response_schema: Optional[Dict[str, Any]]
    choices: Optional[List[str]]
    answer_url: Optional[str]
    expires_at: Optional[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PendingQuestion:
        return cls(
            id=d['id'],
            question=d['question'],
            response_schema=d['response_schema'],
            choices=d['choices'],
            answer_url=d['answer_url'],
            expires_at=d['expires_at'],
            raw=d,
        )


@dataclass
class Percentiles:
    p50: Optional[int] = None
    p95: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Percentiles:
        return cls(
            p50=d.get('p50'),
            p95=d.get('p95'),
            raw=d,
        )


@dataclass
class PeriodUsage:
    """What a project used in one period."""

    tickets: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    by_model: Dict[str, ModelFigures]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PeriodUsage:
        return cls(
            tickets=d['tickets'],
            input_tokens=d['input_tokens'],
            output_tokens=d['output_tokens'],
            cost_usd=d['cost_usd'],
            by_model=d['by_model'],
            raw=d,
        )


@dataclass
class Price:
    """A model's price in US dollars per million tokens."""

    model: str
    input: Any
    output: Any
    source: PriceSource
    provider: Optional[str] = None
    cache_read: Optional[Any] = None
    cache_creation: Optional[Any] = None
    effective_from: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Price:
        return cls(
            model=d['model'],
            input=d['input'],
            output=d['output'],
            source=d['source'],
            provider=d.get('provider'),
            cache_read=d.get('cache_read'),
            cache_creation=d.get('cache_creation'),
            effective_from=d.get('effective_from'),
            raw=d,
        )


@dataclass
class PriceList:
    items: List[Price]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PriceList:
        return cls(
            items=_list(Price.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class Project:
    name: str
    key_prefix: str
    weight: int
    quotas: Quotas
    created_at: str
    updated_at: str
    description: Optional[str] = None
    rate_limit: Optional[RateLimit] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Project:
        return cls(
            name=d['name'],
            key_prefix=d['key_prefix'],
            weight=d['weight'],
            quotas=Quotas.from_json(d['quotas']),
            created_at=d['created_at'],
            updated_at=d['updated_at'],
            description=d.get('description'),
            rate_limit=_opt(RateLimit.from_json, d.get('rate_limit')),
            raw=d,
        )


@dataclass
class ProjectList:
    items: List[Project]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ProjectList:
        return cls(
            items=_list(Project.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class ProjectToken:
    """A project token as listed: never its secret."""

    id: str
    name: str
    scopes: List[TokenScope]
    created_at: str
    expires_at: Optional[str] = None
    rate_limit: Optional[RateLimit] = None
    last_used_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ProjectToken:
        return cls(
            id=d['id'],
            name=d['name'],
            scopes=d['scopes'],
            created_at=d['created_at'],
            expires_at=d.get('expires_at'),
            rate_limit=_opt(RateLimit.from_json, d.get('rate_limit')),
            last_used_at=d.get('last_used_at'),
            raw=d,
        )


@dataclass
class ProjectUsage:
    day: PeriodUsage
    month: PeriodUsage
    quotas: Quotas
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ProjectUsage:
        return cls(
            day=PeriodUsage.from_json(d['day']),
            month=PeriodUsage.from_json(d['month']),
            quotas=Quotas.from_json(d['quotas']),
            raw=d,
        )


@dataclass
class ProviderDef:
    name: str
    kind: ProviderKind
    base_url: str
    headers: Dict[str, str]
    builtin: bool
    configured: bool
    api_key: Optional[str] = None
    timeout_ms: Optional[int] = None
    max_concurrent: Optional[int] = None
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ProviderDef:
        return cls(
            name=d['name'],
            kind=d['kind'],
            base_url=d['base_url'],
            headers=d['headers'],
            builtin=d['builtin'],
            configured=d['configured'],
            api_key=d.get('api_key'),
            timeout_ms=d.get('timeout_ms'),
            max_concurrent=d.get('max_concurrent'),
            created_at=d.get('created_at'),
            updated_at=d.get('updated_at'),
            raw=d,
        )


@dataclass
class ProviderList:
    items: List[ProviderDef]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ProviderList:
        return cls(
            items=_list(ProviderDef.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class PutAgent:
    role: Optional[str] = None
    provider: Optional[str] = None
    model: Optional[str] = None
    labels: Optional[List[str]] = None
    tools: Optional[List[str]] = None
    context_window: Optional[int] = None
    max_turns: Optional[int] = None
    max_input_tokens: Optional[int] = None
    max_output_tokens: Optional[int] = None
    max_schema_retries: Optional[int] = None
    max_request_retries: Optional[int] = None
    request_retry_delay_ms: Optional[int] = None
    temperature: Optional[float] = None
    max_tokens: Optional[int] = None
    thinking_budget: Optional[int] = None
    tool_choice: Optional[str] = None
    max_concurrent: Optional[int] = None
    budget_usd_per_day: Optional[float] = None
    approval_timeout_secs: Optional[int] = None
    on_timeout: Optional[OnTimeout] = None
    question_timeout_secs: Optional[int] = None
    on_question_timeout: Optional[QuestionTimeout] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PutAgent:
        return cls(
            role=d.get('role'),
            provider=d.get('provider'),
            model=d.get('model'),
            labels=d.get('labels'),
            tools=d.get('tools'),
            context_window=d.get('context_window'),
            max_turns=d.get('max_turns'),
            max_input_tokens=d.get('max_input_tokens'),
            max_output_tokens=d.get('max_output_tokens'),
            max_schema_retries=d.get('max_schema_retries'),
            max_request_retries=d.get('max_request_retries'),
            request_retry_delay_ms=d.get('request_retry_delay_ms'),
            temperature=d.get('temperature'),
            max_tokens=d.get('max_tokens'),
            thinking_budget=d.get('thinking_budget'),
            tool_choice=d.get('tool_choice'),
            max_concurrent=d.get('max_concurrent'),
            budget_usd_per_day=d.get('budget_usd_per_day'),
            approval_timeout_secs=d.get('approval_timeout_secs'),
            on_timeout=d.get('on_timeout'),
            question_timeout_secs=d.get('question_timeout_secs'),
            on_question_timeout=d.get('on_question_timeout'),
            raw=d,
        )


@dataclass
class PutMcpServer:
    url: str
    headers: Optional[Dict[str, str]] = None
    timeout_ms: Optional[int] = None
    requires_approval: Any = None
    approval_timeout_secs: Optional[int] = None
    on_timeout: Optional[OnTimeout] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PutMcpServer:
        return cls(
            url=d['url'],
            headers=d.get('headers'),
            timeout_ms=d.get('timeout_ms'),
            requires_approval=d.get('requires_approval'),
            approval_timeout_secs=d.get('approval_timeout_secs'),
            on_timeout=d.get('on_timeout'),
            raw=d,
        )


@dataclass
class PutPrice:
    input: float
    output: float
    cache_read: Optional[float] = None
    cache_creation: Optional[float] = None
    effective_from: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PutPrice:
        return cls(
            input=d['input'],
            output=d['output'],
            cache_read=d.get('cache_read'),
            cache_creation=d.get('cache_creation'),
            effective_from=d.get('effective_from'),
            raw=d,
        )


@dataclass
class PutProvider:
    kind: ProviderKind
    base_url: str
    api_key: Optional[str] = None
    headers: Optional[Dict[str, str]] = None
    timeout_ms: Optional[int] = None
    max_concurrent: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PutProvider:
        return cls(
            kind=d['kind'],
            base_url=d['base_url'],
            api_key=d.get('api_key'),
            headers=d.get('headers'),
            timeout_ms=d.get('timeout_ms'),
            max_concurrent=d.get('max_concurrent'),
            raw=d,
        )


@dataclass
class PutTool:
    url: str
    description: Optional[str] = None
    input_schema: Optional[Dict[str, Any]] = None
    method: Optional[HttpMethod] = None
    headers: Optional[Dict[str, str]] = None
    timeout_ms: Optional[int] = None
    requires_approval: Optional[bool] = None
    approval_timeout_secs: Optional[int] = None
    on_timeout: Optional[OnTimeout] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> PutTool:
        return cls(
            url=d['url'],
            description=d.get('description'),
            input_schema=d.get('input_schema'),
            method=d.get('method'),
            headers=d.get('headers'),
            timeout_ms=d.get('timeout_ms'),
            requires_approval=d.get('requires_approval'),
            approval_timeout_secs=d.get('approval_timeout_secs'),
            on_timeout=d.get('on_timeout'),
            raw=d,
        )


@dataclass
class Quotas:
    """A project's limits per UTC day (and month for money); null is none."""

    tickets_per_day: Optional[int] = None
    tokens_per_day: Optional[int] = None
    cost_usd_per_day: Optional[float] = None
    cost_usd_per_month: Optional[float] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Quotas:
        return cls(
            tickets_per_day=d.get('tickets_per_day'),
            tokens_per_day=d.get('tokens_per_day'),
            cost_usd_per_day=d.get('cost_usd_per_day'),
            cost_usd_per_month=d.get('cost_usd_per_month'),
            raw=d,
        )


@dataclass
class RateLimit:
    """A token bucket: refilled at `requests_per_s`, holding at most `burst`."""

    requests_per_s: float
    burst: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> RateLimit:
        return cls(
            requests_per_s=d['requests_per_s'],
            burst=d['burst'],
            raw=d,
        )


@dataclass
class ReplayTicket:
    agent: Optional[str] = None
    agent_version: Optional[int] = None
    provider: Optional[str] = None
    model: Optional[str] = None
    tools: Optional[ReplayTools] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ReplayTicket:
        return cls(
            agent=d.get('agent'),
            agent_version=d.get('agent_version'),
            provider=d.get('provider'),
            model=d.get('model'),
            tools=d.get('tools'),
            raw=d,
        )


@dataclass
class Rollback:
    version: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Rollback:
        return cls(
            version=d['version'],
            raw=d,
        )


@dataclass
class Schedule:
    """A schedule as the API shows it."""

    id: str
    cron: str
    timezone: str
    ticket: TicketTemplate
    enabled: bool
    overlap: Overlap
    catch_up: CatchUp
    catch_up_window_secs: int
    upcoming: List[str]
    created_at: str
    updated_at: str
    name: Optional[str] = None
    start_at: Optional[str] = None
    end_at: Optional[str] = None
    next_run_at: Optional[str] = None
    last_run_at: Optional[str] = None
    last_ticket: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Schedule:
        return cls(
            id=d['id'],
            cron=d['cron'],
            timezone=d['timezone'],
            ticket=TicketTemplate.from_json(d['ticket']),
            enabled=d['enabled'],
            overlap=d['overlap'],
            catch_up=d['catch_up'],
            catch_up_window_secs=d['catch_up_window_secs'],
            upcoming=d['upcoming'],
            created_at=d['created_at'],
            updated_at=d['updated_at'],
            name=d.get('name'),
            start_at=d.get('start_at'),
            end_at=d.get('end_at'),
            next_run_at=d.get('next_run_at'),
            last_run_at=d.get('last_run_at'),
            last_ticket=d.get('last_ticket'),
            raw=d,
        )


@dataclass
class ScheduleList:
    items: List[Schedule]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ScheduleList:
        return cls(
            items=_list(Schedule.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class StatusCounts:
    todo: int
    in_progress: int
    waiting: int
    done: int
    failed: int
    cancelled: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> StatusCounts:
        return cls(
            todo=d['todo'],
            in_progress=d['in_progress'],
            waiting=d['waiting'],
            done=d['done'],
            failed=d['failed'],
            cancelled=d['cancelled'],
            raw=d,
        )


@dataclass
class Storage:
    """What the database stores: exact counts, and its size as Postgres reports it."""

    tickets: int
    events: int
    comments: int
    bytes: int
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Storage:
        return cls(
            tickets=d['tickets'],
            events=d['events'],
            comments=d['comments'],
            bytes=d['bytes'],
            raw=d,
        )


@dataclass
class Ticket:
    id: str
    key: str
    task: Any
    labels: List[str]
    status: Status
    reporter: str
    priority: int
    attempts: int
    max_attempts: int
    metadata: Any
    usage: TicketUsage
    created_at: str
    updated_at: str
    pending_approvals: List[PendingApproval]
    pending_question: Optional[PendingQuestion]
    budget_usd: Optional[float]
    waiting_for: Optional[WaitingFor]
    agent_version: Optional[int]
    agent: Optional[str] = None
    parent_id: Optional[str] = None
    parent_key: Optional[str] = None
    schema: Any = None
    result: Any = None
    error: Optional[TicketError] = None
    deadline_secs: Optional[int] = None
    deadline_at: Optional[str] = None
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Ticket:
        return cls(
            id=d['id'],
            key=d['key'],
            task=d['task'],
            labels=d['labels'],
            status=d['status'],
            reporter=d['reporter'],
            priority=d['priority'],
            attempts=d['attempts'],
            max_attempts=d['max_attempts'],
            metadata=d['metadata'],
            usage=TicketUsage.from_json(d['usage']),
            created_at=d['created_at'],
            updated_at=d['updated_at'],
            pending_approvals=_list(PendingApproval.from_json, d['pending_approvals']),
            pending_question=_opt(PendingQuestion.from_json, d['pending_question']),
            budget_usd=d['budget_usd'],
            waiting_for=d['waiting_for'],
            agent_version=d['agent_version'],
            agent=d.get('agent'),
            parent_id=d.get('parent_id'),
            parent_key=d.get('parent_key'),
            schema=d.get('schema'),
            result=d.get('result'),
            error=_opt(TicketError.from_json, d.get('error')),
            deadline_secs=d.get('deadline_secs'),
            deadline_at=d.get('deadline_at'),
            started_at=d.get('started_at'),
            finished_at=d.get('finished_at'),
            raw=d,
        )


@dataclass
class TicketError:
    kind: str
    message: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TicketError:
        return cls(
            kind=d['kind'],
            message=d['message'],
            raw=d,
        )


@dataclass
class TicketList:
    items: List[Ticket]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TicketList:
        return cls(
            items=_list(Ticket.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class TicketTemplate:
    """The ticket each firing creates (the body of `POST /v1/tickets`, without `parent`)."""

    task: Any
    labels: Optional[List[str]] = None
    priority: Optional[int] = None
    schema: Optional[Dict[str, Any]] = None
    metadata: Optional[Dict[str, Any]] = None
    max_attempts: Optional[int] = None
    deadline_secs: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TicketTemplate:
        return cls(
            task=d['task'],
            labels=d.get('labels'),
            priority=d.get('priority'),
            schema=d.get('schema'),
            metadata=d.get('metadata'),
            max_attempts=d.get('max_attempts'),
            deadline_secs=d.get('deadline_secs'),
            raw=d,
        )


@dataclass
class TicketTemplateBody:
    """The ticket each firing creates (as `POST /v1/tickets`): `{scheduled_for}` (RFC 3339 in the
schedule's zone) and `{previous_result}` (the last done ticket's result as JSON text, or
`null`) in its task's strings are replaced; its metadata gets `schedule: {id, name, scheduled_for}`."""

    task: Any
    labels: Optional[List[str]] = None
    priority: Optional[int] = None
    schema: Any = None
    metadata: Optional[Dict[str, Any]] = None
    max_attempts: Optional[int] = None
    deadline_secs: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TicketTemplateBody:
        return cls(
            task=d['task'],
            labels=d.get('labels'),
            priority=d.get('priority'),
            schema=d.get('schema'),
            metadata=d.get('metadata'),
            max_attempts=d.get('max_attempts'),
            deadline_secs=d.get('deadline_secs'),
            raw=d,
        )


@dataclass
class TicketUsage:
    """Token and call counts summed over every model request of a ticket."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    requests: int
    tool_calls: int
    cost_usd: Optional[float]
    unpriced: bool
    estimated: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TicketUsage:
        return cls(
            input_tokens=d['input_tokens'],
            output_tokens=d['output_tokens'],
            cache_read_tokens=d['cache_read_tokens'],
            cache_creation_tokens=d['cache_creation_tokens'],
            requests=d['requests'],
            tool_calls=d['tool_calls'],
            cost_usd=d['cost_usd'],
            unpriced=d['unpriced'],
            estimated=d.get('estimated'),
            raw=d,
        )


@dataclass
class TokenList:
    items: List[ProjectToken]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TokenList:
        return cls(
            items=_list(ProjectToken.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class TokenUsage:
    """Tokens of one model response, as the provider reported them."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    estimated: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> TokenUsage:
        return cls(
            input_tokens=d['input_tokens'],
            output_tokens=d['output_tokens'],
            cache_read_tokens=d['cache_read_tokens'],
            cache_creation_tokens=d['cache_creation_tokens'],
            estimated=d.get('estimated'),
            raw=d,
        )


@dataclass
class ToolList:
    items: List[HttpToolDef]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> ToolList:
        return cls(
            items=_list(HttpToolDef.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )


@dataclass
class Webhook:
    """An endpoint as the API shows it (never with its secret, which only its creation returns)."""

    id: str
    url: str
    events: List[str]
    labels: List[str]
    disabled: bool
    created_at: str
    updated_at: str
    description: Optional[str] = None
    disabled_reason: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> Webhook:
        return cls(
            id=d['id'],
            url=d['url'],
            events=d['events'],
            labels=d['labels'],
            disabled=d['disabled'],
            created_at=d['created_at'],
            updated_at=d['updated_at'],
            description=d.get('description'),
            disabled_reason=d.get('disabled_reason'),
            raw=d,
        )


@dataclass
class WebhookList:
    items: List[Webhook]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received, fields this version does not know included."""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> WebhookList:
        return cls(
            items=_list(Webhook.from_json, d['items']),
            next_cursor=d.get('next_cursor'),
            raw=d,
        )
