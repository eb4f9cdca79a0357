-- Money: prices per model, what each ticket's requests cost, and budgets that reserve a request's
-- worst case before it is sent. Amounts are US dollars as exact `numeric`.

-- The desk's own prices (the built-in table is compiled in). `provider` '' holds for any provider;
-- a model ending in `*` is a prefix. Several rows of one price differ by `effective_from`: a
-- request pays the latest in force when it was sent.
CREATE TABLE prices (
    model           text NOT NULL,
    provider        text NOT NULL DEFAULT '',
    input           numeric NOT NULL CHECK (input >= 0),
    output          numeric NOT NULL CHECK (output >= 0),
    cache_read      numeric CHECK (cache_read >= 0),
    cache_creation  numeric CHECK (cache_creation >= 0),
    effective_from  timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, provider, effective_from)
);

ALTER TABLE tickets
    ADD COLUMN cost_usd numeric NOT NULL DEFAULT 0,
    ADD COLUMN unpriced boolean NOT NULL DEFAULT false,
    ADD COLUMN budget_usd numeric CHECK (budget_usd >= 0),
    -- Why a waiting ticket waits when the desk stopped it: 'budget' or 'price'.
    ADD COLUMN waiting_for text,
    -- The budget that stopped it ('ticket', or 'agent' with its name and UTC day), so that a
    -- raise or a new day sends it back to `todo`.
    ADD COLUMN blocked_scope text,
    ADD COLUMN blocked_name text,
    ADD COLUMN blocked_period text,
    -- The model its agent ran at its latest claim (what `/v1/stats` counts its usage under).
    ADD COLUMN model text;

ALTER TABLE agents ADD COLUMN budget_usd_per_day numeric CHECK (budget_usd_per_day >= 0);

-- One row per budget and period: what was spent and what is reserved for requests in flight.
-- A reservation is one conditional UPDATE (spent + reserved + amount <= limit_usd), so processes
-- that reserve at once never overshoot.
CREATE TABLE budgets (
    id         bigserial PRIMARY KEY,
    scope      text NOT NULL,
    name       text NOT NULL,
    period     text NOT NULL,
    limit_usd  numeric NOT NULL,
    spent      numeric NOT NULL DEFAULT 0,
    reserved   numeric NOT NULL DEFAULT 0,
    -- The highest threshold (50, 80, 100 %) announced in this period.
    notified   integer NOT NULL DEFAULT 0,
    UNIQUE (scope, name, period)
);

-- What a claim has reserved and not yet settled. Tied to the claim (`generation`): the reaper
-- gives back what a claim that ended without settling still holds.
CREATE TABLE budget_reservations (
    ticket_id   uuid NOT NULL,
    generation  bigint NOT NULL,
    budget_id   bigint NOT NULL REFERENCES budgets (id) ON DELETE CASCADE,
    amount      numeric NOT NULL,
    PRIMARY KEY (ticket_id, budget_id)
);

CREATE INDEX tickets_waiting_for ON tickets (waiting_for) WHERE waiting_for IS NOT NULL;
