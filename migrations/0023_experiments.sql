-- Experiments: tickets × arms, each pair a replay (an ordinary ticket, run at low priority), with
-- an optional blind judge. Figures are read from the replays' and judges' own rows, never kept
-- apart. Tickets are not referenced by foreign keys: retention may delete them first, and an
-- experiment then shows what is left.
CREATE TABLE experiments (
    id          uuid PRIMARY KEY,
    project_id  bigint NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name        text NOT NULL,
    status      text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'cancelled')),
    tools       text NOT NULL,
    arms        jsonb NOT NULL,
    judge       jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX experiments_by_project ON experiments (project_id, created_at DESC);
CREATE INDEX experiments_running ON experiments (created_at) WHERE status = 'running';

-- One replay per original ticket and arm.
CREATE TABLE experiment_runs (
    experiment_id uuid NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    position      integer NOT NULL,
    original_id   uuid NOT NULL,
    original_key  text NOT NULL,
    arm           text NOT NULL,
    ticket_id     uuid NOT NULL,
    PRIMARY KEY (experiment_id, original_id, arm)
);

-- The judge's ticket for one original, and the order it was shown the arms' results in
-- (`{"A": arm, "B": arm, …}`); no ticket when fewer than two arms had a result to compare.
CREATE TABLE experiment_judgements (
    experiment_id uuid NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    original_id   uuid NOT NULL,
    ticket_id     uuid,
    shown         jsonb NOT NULL,
    PRIMARY KEY (experiment_id, original_id)
);
