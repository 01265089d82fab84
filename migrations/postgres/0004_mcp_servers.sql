-- Registered external MCP servers (internal/federation). The tools column holds the pinned
-- definitions [{ref, name, pin}]; args the stdio command's arguments.
CREATE TABLE mcp_servers (
    provider_id   text        PRIMARY KEY CHECK (provider_id <> ''),
    transport     text        NOT NULL CHECK (transport IN ('streamable-http', 'stdio')),
    url           text        NOT NULL,
    command       text        NOT NULL,
    args          json        NOT NULL,
    auth          text        NOT NULL,
    timeout_ms    integer     NOT NULL CHECK (timeout_ms > 0),
    tools         json        NOT NULL,
    generation    bigint      NOT NULL CHECK (generation >= 1),
    registered_by text        NOT NULL,
    registered_at timestamptz NOT NULL,
    synced_at     timestamptz NOT NULL
);
