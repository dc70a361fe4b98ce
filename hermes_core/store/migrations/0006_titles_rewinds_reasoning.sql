-- Schema version 6: conversation commands (docs/behaviour.md §11) and reasoning models (§3).
--
-- `sessions.title`: the display title set by `/new <title>` or `/title <text>` (shown by `/resume`).
-- `sessions.rewind_count`: how many times `rewind_session` rewound the session (`/undo`, `/retry`).
-- `messages.reasoning`: what a reasoning model returned beside the text, as one JSON object with
-- the keys that were set (`reasoning`, `reasoning_content`, `reasoning_details`,
-- `codex_reasoning_items`); NULL for every other message.
ALTER TABLE sessions ADD COLUMN title TEXT;
ALTER TABLE sessions ADD COLUMN rewind_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN reasoning TEXT;
