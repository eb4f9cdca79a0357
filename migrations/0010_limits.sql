-- Limits that hold across processes: how many tickets an agent works on at once (enforced by the
-- claim statement), and a ticket's deadline.
ALTER TABLE agents ADD COLUMN max_concurrent integer CHECK (max_concurrent IS NULL OR max_concurrent >= 1);

ALTER TABLE tickets ADD COLUMN deadline_at timestamptz;
-- Only tickets with a deadline that can still miss it: the others never touch this index.
CREATE INDEX tickets_deadline_idx ON tickets (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('todo', 'in_progress', 'waiting');
ALTER TABLE tickets ADD COLUMN deadline_secs integer CHECK (deadline_secs IS NULL OR deadline_secs >= 1);
