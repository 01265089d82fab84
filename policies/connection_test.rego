package xematest.authz

# connection.rego: a capability served through a connection (input.connection).

with_connection(conn) := object.union(agent, {"connection": conn})

connect_url := "https://gw.example/console/connections"

test_connected_org_account_allowed if {
	dec := decide(with_connection({"provider": "slack", "owner": "org", "status": "connected", "id": "con_1"}))
	dec.allow == true
}

test_missing_connection_denied_with_a_connect_suggestion if {
	dec := decide(with_connection({"provider": "slack", "owner": "user", "person": "user:ann", "status": "missing", "connectUrl": connect_url}))
	codes(dec) == {"CONNECTION_REQUIRED"}
	some r in dec.reasons
	contains(r.detail, "user:ann has none")
	{"kind": "connect", "server": "slack", "owner": "user", "url": connect_url} in dec.suggestions
}

test_expired_connection_denied if {
	dec := decide(with_connection({"provider": "slack", "owner": "org", "status": "needs-reconnect", "connectUrl": connect_url}))
	codes(dec) == {"CONNECTION_EXPIRED"}
	some r in dec.reasons
	contains(r.detail, "the org")
	{"kind": "connect", "server": "slack", "owner": "org", "url": connect_url} in dec.suggestions
}

test_user_connection_without_a_person if {
	dec := decide(with_connection({"provider": "slack", "owner": "user", "status": "missing"}))
	codes(dec) == {"CONNECTION_REQUIRED"}
	some r in dec.reasons
	contains(r.detail, "no person")
}

test_no_connect_suggestion_without_a_person if {
	dec := decide(with_connection({"provider": "slack", "owner": "user", "status": "missing", "connectUrl": connect_url}))
	not "connect" in {s.kind | some s in dec.suggestions}
}

# Fail closed: whatever is not a connected connection denies, a malformed one too.
test_malformed_connections_deny if {
	every conn in [{}, {"status": "CONNECTED"}, {"owner": "team", "status": "unknown"}, "connected", true, []] {
		dec := decide(with_connection(conn))
		dec.allow == false
		"CONNECTION_REQUIRED" in codes(dec)
	}
}

test_no_connection_denies_nothing if {
	dec := decide(agent)
	not "CONNECTION_REQUIRED" in codes(dec)
	dec.allow == true
}
