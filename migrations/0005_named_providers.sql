-- Named model providers, an agent's tool choice, and whether a ticket's usage was estimated.
CREATE TABLE providers (
    name        text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('openai', 'anthropic')),
    base_url    text NOT NULL,
    -- as given: a `${env:NAME}` template is expanded only when a request is sent
    api_key     text,
    headers     jsonb NOT NULL DEFAULT '{}',
    timeout_ms  bigint NOT NULL DEFAULT 600000,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- An agent's provider may now name a defined provider (checked by the API).
ALTER TABLE agents DROP CONSTRAINT agents_provider_check;
ALTER TABLE agents ADD COLUMN tool_choice text NOT NULL DEFAULT 'auto';

ALTER TABLE tickets ADD COLUMN usage_estimated boolean NOT NULL DEFAULT false;
