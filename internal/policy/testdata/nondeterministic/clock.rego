package xema.custom

# A platform rule reading the clock: decisions are no longer a function of the input alone.
deny contains {"code": "TOO_LATE", "detail": "after the year 3000"} if {
	time.now_ns() > 32503680000000000000
}
