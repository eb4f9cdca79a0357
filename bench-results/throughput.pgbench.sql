BEGIN;
WITH t AS (
    INSERT INTO tickets (id, task, last_event_seq) VALUES (gen_random_uuid(), '"pgbench"', 1)
    RETURNING id, key)
INSERT INTO events (ticket_id, ticket_key, seq, kind, data)
SELECT id, key, 1, 'ticket.created', '{}' FROM t;
COMMIT;
BEGIN;
WITH c AS (
    SELECT id FROM tickets WHERE project_id = 1 AND status = 'todo'
    ORDER BY priority DESC, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED),
u AS (
    UPDATE tickets t SET status = 'in_progress', generation = t.generation + 1, attempts = t.attempts + 1,
        last_event_seq = t.last_event_seq + 1, claimed_at = now(), started_at = now(), updated_at = now()
    FROM c WHERE t.id = c.id
    RETURNING t.id, t.number, t.key, t.last_event_seq),
e AS (
    INSERT INTO events (ticket_id, ticket_key, seq, kind, data)
    SELECT id, key, last_event_seq, 'ticket.started', '{}' FROM u)
SELECT coalesce((SELECT number FROM u), 0) AS claimed \gset
COMMIT;
BEGIN;
WITH u AS (
    UPDATE tickets SET status = 'done', result = '"ok"', last_event_seq = last_event_seq + 1,
        finished_at = now(), updated_at = now()
    WHERE project_id = 1 AND number = :claimed AND status = 'in_progress'
    RETURNING id, key, last_event_seq)
INSERT INTO events (ticket_id, ticket_key, seq, kind, data)
SELECT id, key, last_event_seq, 'ticket.done', '{}' FROM u;
COMMIT;
