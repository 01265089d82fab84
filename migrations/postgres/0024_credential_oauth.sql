-- An OAuth credential (issue 37, internal/connection): its authorization server and client,
-- JSON kept as text ('' for a static credential, whose sealed value is the provider's token;
-- for an OAuth one the sealed value is the client secret, and the tokens are connections').
ALTER TABLE credentials ADD COLUMN oauth text NOT NULL DEFAULT '';
