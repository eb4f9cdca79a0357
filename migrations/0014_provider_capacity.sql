-- Provider capacity: a named provider's `max_concurrent`, and the model requests that hold or wait
-- for one of a provider's slots, across every process of the desk.
ALTER TABLE providers ADD COLUMN max_concurrent integer
    CHECK (max_concurrent BETWEEN 1 AND 1024);

-- One row per model request to a provider with a limit: waiting (`holding` false) or holding a
-- slot. The id is the request's place in line. Rows live for a lease, renewed while the request
-- waits or runs, so a process that dies gives its slots and places back when they expire.
CREATE TABLE provider_slots (
    id          bigserial PRIMARY KEY,
    provider    text NOT NULL,
    ticket_id   uuid,
    holding     boolean NOT NULL DEFAULT false,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX provider_slots_line ON provider_slots (provider, id);
