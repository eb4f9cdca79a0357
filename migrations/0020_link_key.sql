-- The desk's own signing keys, shared by every process: `links` signs the approve and deny links
-- of waiting tool calls. Made once, by whichever process needs it first.
CREATE TABLE desk_keys (
    name        text PRIMARY KEY,
    secret      bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
