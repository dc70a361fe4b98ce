-- Schema version 3: conversation commands and reasoning models (the core's state.db schema 6;
-- docs/behaviour.md §3, §11). `sessions.title`: the display title (`/new <title>`, `/title`);
-- `sessions.rewind_count`: rewinds by `/undo` / `/retry`; `messages.reasoning`: the reasoning
-- fields of a reasoning model's reply as one JSON object, NULL otherwise.
ALTER TABLE sessions ADD COLUMN title TEXT;
ALTER TABLE sessions ADD COLUMN rewind_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN reasoning TEXT;
