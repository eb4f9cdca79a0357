-- Versions of agents: every change of an agent's settings is a new immutable version (1, 2, …),
-- kept whole in `agent_versions` (the agent's row as JSON, as a claim reads it). A ticket records
-- the version its latest claim ran (`agent_version`); one created with an agent and a version is
-- pinned to it (`version_pinned`).
ALTER TABLE agents ADD COLUMN version integer NOT NULL DEFAULT 1;

CREATE TABLE agent_versions (
    project_id  bigint NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name        text NOT NULL,
    version     integer NOT NULL,
    definition  jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, name, version)
);
INSERT INTO agent_versions (project_id, name, version, definition, created_at)
SELECT a.project_id, a.name, 1, to_jsonb(a), a.updated_at FROM agents a;

-- A new agent goes on from the versions of a deleted one of the same name (they stay, as the
-- record of what tickets ran).
CREATE FUNCTION agentdesk_agent_first_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := coalesce((SELECT max(v.version) FROM agent_versions v
                             WHERE v.project_id = NEW.project_id AND v.name = NEW.name), 0) + 1;
    RETURN NEW;
END $$;
CREATE TRIGGER agents_first_version BEFORE INSERT ON agents
    FOR EACH ROW EXECUTE FUNCTION agentdesk_agent_first_version();

-- Each new version is kept, in the transaction that makes it.
CREATE FUNCTION agentdesk_agent_keep_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.version <> OLD.version THEN
        INSERT INTO agent_versions (project_id, name, version, definition)
        VALUES (NEW.project_id, NEW.name, NEW.version, to_jsonb(NEW));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER agents_keep_version AFTER INSERT OR UPDATE ON agents
    FOR EACH ROW EXECUTE FUNCTION agentdesk_agent_keep_version();

-- Constant defaults: no rewrite of the tickets table.
ALTER TABLE tickets ADD COLUMN agent_version integer,
                    ADD COLUMN version_pinned boolean NOT NULL DEFAULT false;
