package xema.authz

# Connections (docs/federation.md, "Connections"). A capability served through a connection
# (an OAuth-protected MCP server whose tokens the gateway holds for the org or for each
# person) gives the call input.connection: the provider, whose account the call needs (owner
# "org", or "user": the person's own, named in person) and its status. A call runs only
# through a connected account; anything else (missing, or malformed) is denied, so the
# gateway never calls such a provider without the owner's token.

connection_needed if {
	_ = input.connection
}

# Exclusive rules, total over any input.connection, so a detail is always defined and the
# deny rules below always fire when they should (a sprintf of an undefined value would not).
connection_owner := "the org" if input.connection.owner == "org"

connection_owner := input.connection.person if {
	input.connection.owner == "user"
	non_empty_string(input.connection.person)
}

# object.get, not input.connection.person: `not f(x)` of an undefined x is undefined.
connection_owner := "no person (a person's own connection is needed: call as that person, or act for one)" if {
	input.connection.owner == "user"
	not non_empty_string(object.get(input.connection, "person", null))
}

connection_owner := "(an owner not named)" if {
	is_object(input.connection)
	not object.get(input.connection, "owner", null) in {"org", "user"}
}

connection_owner := "(an owner not named)" if {
	connection_needed
	not is_object(input.connection)
}

connection_provider := sprintf("%v", [object.get(input.connection, "provider", "(a provider not named)")]) if is_object(input.connection)

connection_provider := "(a provider not named)" if {
	connection_needed
	not is_object(input.connection)
}

deny contains {"code": "CONNECTION_REQUIRED", "detail": sprintf("%s is served through a connection to %s, and %s has none: connect it, then call again", [input.ref, connection_provider, connection_owner])} if {
	connection_needed
	not input.connection.status == "connected"
	not input.connection.status == "needs-reconnect"
}

deny contains {"code": "CONNECTION_EXPIRED", "detail": sprintf("the connection of %s to %s must be made again: its authorization server refused to renew it", [connection_owner, connection_provider])} if {
	connection_needed
	input.connection.status == "needs-reconnect"
}

# Where the owner connects it: the console's Connections page (input.connection.connectUrl).
suggestion contains {"kind": "connect", "server": connection_provider, "owner": input.connection.owner, "url": input.connection.connectUrl} if {
	some code in {"CONNECTION_REQUIRED", "CONNECTION_EXPIRED"}
	denied(code)
	is_string(input.connection.owner)
	non_empty_string(input.connection.connectUrl)
	connection_someone_can_connect
}

# Connecting helps only when there is someone whose account it is: the org (its admins), or
# the person the call is for. An agent acting for no one is told why, not where to connect.
connection_someone_can_connect if input.connection.owner == "org"

connection_someone_can_connect if {
	input.connection.owner == "user"
	non_empty_string(object.get(input.connection, "person", null))
}
