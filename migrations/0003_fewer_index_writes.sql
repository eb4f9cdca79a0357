-- Each new row version is written into every index of its table, so every index that no query
-- needs costs each insert and each non-HOT update.

-- A key is 'TICKET-' || number, and number is unique: lookups by key go through the number's
-- index (see db::tickets), and the key needs no index of its own.
ALTER TABLE tickets DROP CONSTRAINT tickets_key_key;

-- Most tickets have no idempotency key: only those that have one are indexed (still unique).
ALTER TABLE tickets DROP CONSTRAINT tickets_idempotency_key_key;
CREATE UNIQUE INDEX tickets_idempotency_key_idx ON tickets (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- An event is identified by its ticket and seq; its id orders the global stream through
-- events_cursor_idx and is never looked up alone. (ticket_id, seq) becomes the primary key and
-- the index on id goes.
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events DROP CONSTRAINT events_ticket_id_seq_key, ADD PRIMARY KEY (ticket_id, seq);
