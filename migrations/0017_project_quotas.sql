-- Project quotas on tokens and money: a project whose quota is reached is not claimed from until
-- its period ends (`paused_until`) or the quota is raised; the money and token counters are rows
-- of `budgets` (scope `project`), reserved and settled like any other budget.
ALTER TABLE projects ADD COLUMN paused_until timestamptz;

-- `project.quota_reached` is announced once per quota and period, by whichever process first
-- inserts its row.
CREATE TABLE project_quota_notices (
    project_id  bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    quota       text NOT NULL,
    period      text NOT NULL,
    PRIMARY KEY (project_id, quota, period)
);

-- Events of a project that belong to no ticket (`project.quota_reached`): no ticket, no seq. The
-- primary key (ticket_id, seq) becomes a unique index, which serves the same lookups and admits
-- rows without a ticket.
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events ALTER COLUMN ticket_id DROP NOT NULL,
                   ALTER COLUMN ticket_key DROP NOT NULL,
                   ALTER COLUMN seq DROP NOT NULL;
CREATE UNIQUE INDEX events_ticket_seq ON events (ticket_id, seq);
