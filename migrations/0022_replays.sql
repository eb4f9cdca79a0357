-- Replays: a ticket made from another (`POST /v1/tickets/{ticket}/replay`) keeps what it replays
-- in `replay`: `{"of": the original's id, "tools": "recorded" | "live", "provider"?, "model"?}`.
-- With recorded tools its calls are answered from the original's transcript; the provider and
-- model override its agent's for this ticket only.
ALTER TABLE tickets ADD COLUMN replay jsonb;
