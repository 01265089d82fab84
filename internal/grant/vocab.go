package grant

// Effect classes, risk tiers and output classifications of the contribution schema.
const (
	EffectRead  = "read"
	EffectWrite = "write"
	EffectAdmin = "admin"
	// EffectUnknown is the effect class of a required capability nobody declared.
	EffectUnknown = "unknown"

	RiskLow      = "low"
	RiskMedium   = "medium"
	RiskHigh     = "high"
	RiskCritical = "critical"
	// RiskUnknown is the tier of a required capability nobody declared: the digest ranks it
	// above critical, because an admin must not read "low" when part of the risk is unseen.
	RiskUnknown = "unknown"
)

var (
	effectClasses   = []string{EffectRead, EffectWrite, EffectAdmin}
	riskTiers       = []string{RiskLow, RiskMedium, RiskHigh, RiskCritical}
	classifications = []string{"public", "internal", "confidential", "secret", "regulated"}
)

// riskRank orders risk tiers; RiskUnknown sorts above critical.
func riskRank(tier string) int {
	switch tier {
	case RiskLow:
		return 1
	case RiskMedium:
		return 2
	case RiskHigh:
		return 3
	case RiskCritical:
		return 4
	default:
		return 5
	}
}

// effectiveEffectClass is the effect class the permission model uses for a descriptor.
// effectClass is optional in the contribution schema; a capability that does not say it
// only reads is treated as writing, in the digest, the profiles and the policy alike.
func effectiveEffectClass(declared string) string {
	if declared == "" {
		return EffectWrite
	}
	return declared
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// set turns a list into the object set the Rego looks keys up in.
func set(list []string) Set {
	m := make(Set, len(list))
	for _, v := range list {
		m[v] = true
	}
	return m
}
