-- Schedules: recurring tickets. `next_run_at` is the next fire time not yet handled (NULL: it will
-- not fire again); the schedulers of every process sleep until the earliest one (an index-only
-- read) and are woken by a NOTIFY when a schedule changes.
CREATE TABLE schedules (
    id                   uuid PRIMARY KEY,
    name                 text UNIQUE,
    cron                 text NOT NULL,
    timezone             text NOT NULL,
    ticket               jsonb NOT NULL,
    enabled              boolean NOT NULL DEFAULT true,
    start_at             timestamptz,
    end_at               timestamptz,
    overlap              text NOT NULL CHECK (overlap IN ('skip', 'allow', 'cancel_previous')),
    catch_up             text NOT NULL CHECK (catch_up IN ('skip', 'latest')),
    catch_up_window_secs bigint NOT NULL CHECK (catch_up_window_secs >= 0),
    next_run_at          timestamptz,
    last_run_at          timestamptz,
    last_ticket_id       uuid REFERENCES tickets (id) ON DELETE SET NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
-- Only schedules that will fire: paused and finished ones never touch it.
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE enabled AND next_run_at IS NOT NULL;

-- One row per fire time handled (a ticket made, or skipped because the previous one was still
-- open) and per "run now". The unique index is the exactly-once guarantee: a fire time's row is
-- inserted in the same transaction as its ticket, so however many schedulers race, a second
-- insert for the same (schedule, fire time) fails and its transaction (ticket included) rolls back.
CREATE TABLE schedule_firings (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id   uuid NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    scheduled_for timestamptz NOT NULL,
    manual        boolean NOT NULL DEFAULT false,
    outcome       text NOT NULL,
    ticket_id     uuid REFERENCES tickets (id) ON DELETE SET NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX schedule_firings_once_idx ON schedule_firings (schedule_id, scheduled_for) WHERE NOT manual;
CREATE INDEX schedule_firings_tickets_idx ON schedule_firings (schedule_id, id) WHERE ticket_id IS NOT NULL;
