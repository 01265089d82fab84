-- Registered external MCP servers (internal/federation). The tools column holds the pinned
-- definitions [{ref, name, pin}]; args the stdio command's arguments.
CREATE TABLE mcp_servers (
    provider_id   TEXT    PRIMARY KEY CHECK (provider_id <> ''),
    transport     TEXT    NOT NULL CHECK (transport IN ('streamable-http', 'stdio')),
    url           TEXT    NOT NULL,
    command       TEXT    NOT NULL,
    args          TEXT    NOT NULL CHECK (json_valid(args)),
    auth          TEXT    NOT NULL,
    timeout_ms    INTEGER NOT NULL CHECK (timeout_ms > 0),
    tools         TEXT    NOT NULL CHECK (json_valid(tools)),
    generation    INTEGER NOT NULL CHECK (generation >= 1),
    registered_by TEXT    NOT NULL,
    registered_at INTEGER NOT NULL,
    synced_at     INTEGER NOT NULL
);
