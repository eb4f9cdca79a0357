-- Deadlines of approvals: an HTTP tool, an MCP server and an agent may say how long a call waits
-- for a person (`approval_timeout_secs`, null: for ever) and what the desk answers then
-- (`on_timeout`). Each waiting call keeps its deadline in the ticket's `approvals`; the earliest
-- pending one is `approval_deadline_at`, which the deadline check reads through a partial index.
ALTER TABLE http_tools ADD COLUMN approval_timeout_secs integer, ADD COLUMN on_timeout text;
ALTER TABLE mcp_servers ADD COLUMN approval_timeout_secs integer, ADD COLUMN on_timeout text;
ALTER TABLE agents ADD COLUMN approval_timeout_secs integer, ADD COLUMN on_timeout text;
ALTER TABLE tickets ADD COLUMN approval_deadline_at timestamptz;
CREATE INDEX tickets_approval_deadline ON tickets (approval_deadline_at) WHERE approval_deadline_at IS NOT NULL;
