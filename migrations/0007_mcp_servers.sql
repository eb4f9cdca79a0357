-- MCP servers defined through the API (servers from AGENTDESK_MCP_CONFIG are not stored).
CREATE TABLE mcp_servers (
    name              text PRIMARY KEY,
    -- as given: `${env:NAME}` templates are expanded only when connecting, never stored expanded
    url               text NOT NULL,
    headers           jsonb NOT NULL DEFAULT '{}',
    timeout_ms        bigint NOT NULL DEFAULT 60000,
    -- false, true, or an array of the server's tool names
    requires_approval jsonb NOT NULL DEFAULT 'false',
    -- bumped by every replacement, so a process holding a connection for an older one reconnects
    revision          bigint NOT NULL DEFAULT 1,
    -- the tools as last listed, and `ok` or the last error, by whichever process listed them
    tools             jsonb NOT NULL DEFAULT '[]',
    status            text NOT NULL DEFAULT 'pending',
    listed_at         timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
