// Package ratelimit counts calls against the rate-limit and quota obligations of a decision.
// Counts live in the store (fixed windows, one atomic UPSERT per limit), so every gateway
// replica on one PostgreSQL shares them: the total admitted never passes the limit.
package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/xemahq/xema/internal/policy"
)

// Obligation kinds the limiter counts.
const (
	KindRate  = "rate-limit"
	KindQuota = "quota"
)

// Counter is where counts live; store.ObligationStore is one.
type Counter interface {
	AddUsage(ctx context.Context, key string, window int64, n, limit int64, expires time.Time) (count int64, ok bool, err error)
}

// Limiter counts calls. Safe for concurrent use.
type Limiter struct {
	Counter Counter
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Key is whose calls a limit counts: one capability, one subject, one environment.
type Key struct {
	Ref         string
	Subject     string
	Environment string
}

// limit is one rate-limit or quota obligation, parsed.
type limit struct {
	kind     string
	requests int64
	per      time.Duration
}

// Take counts one call against every rate-limit and quota obligation in obs, rate limits
// first. It returns nil when the call is within all of them, otherwise the Usage the policy
// turns into RATE_LIMITED or QUOTA_EXCEEDED, with the seconds until the window that refused
// it ends. A malformed obligation or an unreachable counter is an error: the caller denies.
func (l *Limiter) Take(ctx context.Context, k Key, obs []policy.Obligation) (*policy.Usage, error) {
	limits, err := parse(obs)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	for _, lim := range limits {
		window, retry := windowOf(now, lim.per)
		key := strings.Join([]string{lim.kind, lim.per.String(), k.Ref, k.Subject, k.Environment}, "|")
		_, ok, err := l.Counter.AddUsage(ctx, key, window, 1, lim.requests, now.Add(retry))
		if err != nil {
			return nil, fmt.Errorf("count %s of %s for %s in %s: %w", lim.kind, k.Ref, k.Subject, k.Environment, err)
		}
		if !ok {
			u := &policy.Usage{RetryAfterSeconds: int((retry + time.Second - 1) / time.Second)}
			if lim.kind == KindRate {
				u.RateExceeded = true
			} else {
				u.QuotaExceeded = true
			}
			return u, nil
		}
	}
	return nil, nil
}

// windowOf numbers the fixed window of length per that holds now (windows start at the
// Unix epoch, so every replica agrees) and returns the time left in it.
func windowOf(now time.Time, per time.Duration) (window int64, left time.Duration) {
	n := now.UnixNano()
	window = n / int64(per)
	return window, time.Duration((window+1)*int64(per) - n)
}

// parse keeps the counting obligations of obs, rate limits before quotas.
func parse(obs []policy.Obligation) ([]limit, error) {
	var rates, quotas []limit
	for _, o := range obs {
		if o.Kind != KindRate && o.Kind != KindQuota {
			continue
		}
		per, err := time.ParseDuration(o.Per)
		if err != nil || per < time.Second {
			return nil, fmt.Errorf("%s obligation: per %q is not a duration of at least 1s", o.Kind, o.Per)
		}
		if o.Requests < 1 {
			return nil, fmt.Errorf("%s obligation: requests must be positive, got %d", o.Kind, o.Requests)
		}
		lim := limit{kind: o.Kind, requests: int64(o.Requests), per: per}
		if o.Kind == KindRate {
			rates = append(rates, lim)
		} else {
			quotas = append(quotas, lim)
		}
	}
	return append(rates, quotas...), nil
}
