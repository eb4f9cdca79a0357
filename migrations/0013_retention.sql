-- Retention (AGENTDESK_RETENTION_DAYS): finished tickets are deleted once they are old enough.
--
-- A child outlives its parent: deleting a parent clears the child's `parent_id` (the child keeps
-- working; the `ticket.created` event it was born with still names the parent).
ALTER TABLE tickets DROP CONSTRAINT tickets_parent_id_fkey,
    ADD CONSTRAINT tickets_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES tickets (id) ON DELETE SET NULL;

-- The sweep finds the oldest finished tickets through this index, a few at a time, without
-- reading the ones it keeps. Only finished tickets are in it; a ticket enters it once, when it
-- finishes (an update that changes its status and so writes every index anyway).
CREATE INDEX tickets_finished_idx ON tickets (finished_at)
    WHERE status IN ('done', 'failed', 'cancelled');
