-- Webhook endpoints (Standard Webhooks) and their delivery log.
--
-- Deliveries are derived from the event log: each endpoint keeps its own cursor in the global
-- stream (`cursor_txid`, `cursor_id`: every event at or before it has been answered or given up),
-- advanced only after that. One process at a time delivers an endpoint's events: the one holding
-- its lease (`lease_owner` until `lease_until`, database time); every write of a delivery is
-- fenced by the lease.
CREATE TABLE webhooks (
    id              uuid PRIMARY KEY,
    url             text NOT NULL,
    events          text[] NOT NULL DEFAULT '{}',
    labels          text[] NOT NULL DEFAULT '{}',
    description     text,
    secret          text NOT NULL,
    disabled        boolean NOT NULL DEFAULT false,
    disabled_reason text,
    cursor_txid     xid8 NOT NULL,
    cursor_id       bigint NOT NULL,
    -- failed attempts of the first undelivered event, and when the next one is due
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    lease_owner     uuid,
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_deliveries (
    id          bigserial PRIMARY KEY,
    webhook_id  uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    -- the `webhook-id` the receiver was sent (the same for every attempt of one event)
    event_id    text NOT NULL,
    kind        text NOT NULL,
    attempt     integer NOT NULL,
    status_code integer,
    error       text,
    duration_ms bigint NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id DESC);
