package xema.custom

deny contains {"code": "PLATFORM_BLOCKED", "detail": "agent:blocked is suspended"} if {
	input.subject.ref == "agent:blocked"
}
