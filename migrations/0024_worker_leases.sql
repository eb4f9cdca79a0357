-- One lease per worker process, renewed by one statement every third of the lease whatever the
-- process holds: a desk with 100 000 tickets in flight writes one row a renewal, not 100 000.
-- A ticket claimed under it has lease_expires_at = 'infinity' and the process's worker_id, and
-- is lost when the process's lease expires (the reaper marks the row reaped_at, never renewed
-- again, and requeues its tickets). A finite lease_expires_at is a ticket's own lease.
CREATE TABLE worker_leases (
    worker_id   text PRIMARY KEY,
    expires_at  timestamptz NOT NULL,
    reaped_at   timestamptz
);
