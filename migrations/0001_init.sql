-- agentdesk schema: tickets, their transcript (comments), agents and the event log.

CREATE TABLE agents (
    name                   text PRIMARY KEY,
    role                   text NOT NULL DEFAULT '',
    provider               text CHECK (provider IN ('openai', 'anthropic')),
    model                  text NOT NULL,
    labels                 text[] NOT NULL DEFAULT '{}',
    tools                  text[] NOT NULL,
    context_window         integer,
    max_turns              integer,
    max_input_tokens       bigint,
    max_output_tokens      bigint,
    max_schema_retries     integer NOT NULL DEFAULT 10,
    max_request_retries    integer NOT NULL DEFAULT 10,
    request_retry_delay_ms integer NOT NULL DEFAULT 500,
    temperature            double precision,
    max_tokens             integer,
    thinking_budget        integer,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now()
);

-- Ticket numbers come from a sequence: unique and increasing without a hot counter row.
CREATE SEQUENCE ticket_number_seq;

CREATE TABLE tickets (
    id                  uuid PRIMARY KEY,
    number              bigint NOT NULL UNIQUE DEFAULT nextval('ticket_number_seq'),
    key                 text GENERATED ALWAYS AS ('TICKET-' || number) STORED UNIQUE,
    task                jsonb NOT NULL,
    labels              text[] NOT NULL DEFAULT '{}',
    status              text NOT NULL DEFAULT 'todo'
                        CHECK (status IN ('todo', 'in_progress', 'waiting', 'done', 'failed', 'cancelled')),
    agent               text,
    reporter            text NOT NULL DEFAULT 'user',
    priority            integer NOT NULL DEFAULT 0,
    parent_id           uuid REFERENCES tickets (id),
    schema              jsonb,
    result              jsonb,
    error               jsonb,
    attempts            integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL DEFAULT 3,
    metadata            jsonb NOT NULL DEFAULT '{}',
    -- usage summed over every model request of the ticket
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cache_read_tokens   bigint NOT NULL DEFAULT 0,
    cache_creation_tokens bigint NOT NULL DEFAULT 0,
    requests            bigint NOT NULL DEFAULT 0,
    tool_calls          bigint NOT NULL DEFAULT 0,
    -- claims: every claim bumps the fencing generation; a worker's writes name the generation it holds
    generation          bigint NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz,
    worker_id           text,
    claimed_at          timestamptz,
    work_ms             bigint NOT NULL DEFAULT 0,
    schema_retries      integer NOT NULL DEFAULT 0,
    -- whether the task has been written into the transcript as its first user comment
    seeded              boolean NOT NULL DEFAULT false,
    -- per-ticket counters, bumped under the row lock so seqs have no gaps and commit in order
    last_event_seq      bigint NOT NULL DEFAULT 0,
    last_comment_seq    bigint NOT NULL DEFAULT 0,
    idempotency_key     text UNIQUE,
    idempotency_hash    text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz
);

-- The claim query: todo tickets by priority, then age.
CREATE INDEX tickets_claim_idx ON tickets (priority DESC, created_at, id) WHERE status = 'todo';
-- The reaper: in-progress tickets by lease expiry.
CREATE INDEX tickets_lease_idx ON tickets (lease_expires_at) WHERE status = 'in_progress';
CREATE INDEX tickets_status_idx ON tickets (status, number);
CREATE INDEX tickets_parent_idx ON tickets (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX tickets_labels_idx ON tickets USING gin (labels);

CREATE TABLE comments (
    id          uuid PRIMARY KEY,
    ticket_id   uuid NOT NULL REFERENCES tickets (id) ON DELETE CASCADE,
    seq         bigint NOT NULL,
    author      text NOT NULL CHECK (author IN ('user', 'assistant', 'system')),
    agent       text,
    content     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (ticket_id, seq)
);

-- The event log. `txid` is the writing transaction's id: the global stream reads only events of
-- transactions older than every one still running (pg_snapshot_xmin), so its (txid, id) cursor
-- never skips an event that commits late.
CREATE TABLE events (
    id          bigserial PRIMARY KEY,
    txid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    ticket_id   uuid NOT NULL REFERENCES tickets (id) ON DELETE CASCADE,
    ticket_key  text NOT NULL,
    seq         bigint NOT NULL,
    kind        text NOT NULL,
    agent       text,
    data        jsonb NOT NULL DEFAULT '{}',
    at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (ticket_id, seq)
);
CREATE INDEX events_cursor_idx ON events (txid, id);

-- Whole outputs of tool calls too large to show the model.
CREATE TABLE tool_outputs (
    ticket_id   uuid NOT NULL REFERENCES tickets (id) ON DELETE CASCADE,
    call_id     text NOT NULL,
    tool_name   text NOT NULL,
    output      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ticket_id, call_id)
);
