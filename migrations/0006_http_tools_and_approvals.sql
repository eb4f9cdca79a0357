-- HTTP tools defined through the API, and the approvals of tool calls that wait for a person.
CREATE TABLE http_tools (
    name              text PRIMARY KEY,
    description       text NOT NULL,
    input_schema      jsonb NOT NULL,
    -- as given: `${env:NAME}` templates are expanded only when a call is sent, never stored
    url               text NOT NULL,
    method            text NOT NULL CHECK (method IN ('GET', 'POST', 'PUT', 'PATCH', 'DELETE')),
    headers           jsonb NOT NULL DEFAULT '{}',
    timeout_ms        bigint NOT NULL,
    requires_approval boolean NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- The tool calls of a ticket's last step that wait for (or got) a person's answer:
-- [{call_id, tool_name, input, decision: null | "approved" | "denied", reason}]. NULL when there
-- are none (every ticket without approvals), so reading it costs nothing. Written under the
-- ticket's row lock, in the transaction of the step or the answer, so no answer is ever lost.
ALTER TABLE tickets ADD COLUMN approvals jsonb;
