package identity

// TokenCacheLen is the number of cached verification results of v (tests only).
func TokenCacheLen(v *Verifier) int {
	if v.cache == nil {
		return 0
	}
	return v.cache.len()
}
