// Package ratelimit counts calls against the rate-limit and quota obligations of a decision.
// Counts live in the store (fixed windows, added to all or none atomically), so every
// gateway replica on one PostgreSQL shares them: the total admitted never passes the limit.
// Counters of ended windows are deleted by Prune.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/xemahq/xema/internal/policy"
	"github.com/xemahq/xema/internal/store"
)

// The codes of the answers of a call a limit refused (gateway.Denial with Limited set),
// defined once here, where the limits are counted: the funnel answers them and explain says
// when to retry them.
const (
	CodeRateLimited   = "RATE_LIMITED"
	CodeQuotaExceeded = "QUOTA_EXCEEDED"
)

// Obligation kinds the limiter counts.
const (
	KindRate  = "rate-limit"
	KindQuota = "quota"
)

// Counter is where counts live; store.ObligationStore is one.
type Counter interface {
	AddUsage(ctx context.Context, adds []store.UsageAdd) (counts []int64, refused int, err error)
}

// Limiter counts calls. Safe for concurrent use.
type Limiter struct {
	Counter Counter
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Key is whose calls a limit counts: one capability, one subject of one org, one
// environment. Subject refs are per org (user:alice of acme is not user:alice of beta), so the
// org is part of the key: one org's calls never spend another org's limit.
type Key struct {
	Org         string
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

// Take counts one call against every rate-limit and quota obligation in obs, all or none:
// a call one of them refuses spends nothing of the others. It returns nil when the call is
// within all of them, otherwise the Usage the policy turns into RATE_LIMITED or
// QUOTA_EXCEEDED (a rate limit before a quota when both refuse), with the seconds until the
// window that refused it ends. A malformed obligation or an unreachable counter is an
// error: the caller denies.
func (l *Limiter) Take(ctx context.Context, k Key, obs []policy.Obligation) (*policy.Usage, error) {
	limits, err := parse(obs)
	if err != nil || len(limits) == 0 {
		return nil, err
	}
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	adds := make([]store.UsageAdd, len(limits))
	lefts := make([]time.Duration, len(limits))
	for i, lim := range limits {
		window, left := windowOf(now, lim.per)
		adds[i], lefts[i] = store.UsageAdd{Key: counterKey(lim, k), Window: window, N: 1, Limit: lim.requests, Expires: now.Add(left)}, left
	}
	_, refused, err := l.Counter.AddUsage(ctx, adds)
	if err != nil {
		return nil, fmt.Errorf("count %d limit(s) of %s for %s of %s in %s: %w", len(adds), k.Ref, k.Subject, k.Org, k.Environment, err)
	}
	if refused < 0 {
		return nil, nil
	}
	u := &policy.Usage{RetryAfterSeconds: int((lefts[refused] + time.Second - 1) / time.Second)}
	if limits[refused].kind == KindRate {
		u.RateExceeded = true
	} else {
		u.QuotaExceeded = true
	}
	return u, nil
}

// counterKey is the key of lim's counter for k: fmt's "%s|%s|%s|%q|%q|%q" of kind, per, ref,
// org, subject and environment, the format stored counters carry, built without fmt (its
// Sprintf was ~3 % of a call's CPU). The claim-supplied parts are quoted, so no org,
// subject or environment holding a "|" can spell another caller's key.
func counterKey(lim limit, k Key) string {
	b := make([]byte, 0, 32+len(k.Ref)+len(k.Org)+len(k.Subject)+len(k.Environment))
	b = append(append(b, lim.kind...), '|')
	b = append(append(b, lim.per.String()...), '|')
	b = append(append(b, k.Ref...), '|')
	b = append(strconv.AppendQuote(b, k.Org), '|')
	b = append(strconv.AppendQuote(b, k.Subject), '|')
	return string(strconv.AppendQuote(b, k.Environment))
}

// PruneGrace is how long after its window ends a counter is kept, so a replica whose clock
// lags by less than that never finds its window gone and counts it again from zero.
const PruneGrace = time.Minute

// pruneBatch bounds one DELETE, and pruneBatches one Prune, so pruning never holds many
// locks or runs long; what is left goes on the next Prune.
const (
	pruneBatch   = 1000
	pruneBatches = 100
)

// Pruner drops counters of ended windows; store.ObligationStore is one.
type Pruner interface {
	PruneUsage(ctx context.Context, before time.Time, limit int) (int64, error)
}

// Prune deletes the counters whose window ended PruneGrace before now, in batches, and says
// how many went; a batch short of pruneBatch means none are left.
func Prune(ctx context.Context, p Pruner, now time.Time) (int64, error) {
	var total int64
	for range pruneBatches {
		n, err := p.PruneUsage(ctx, now.Add(-PruneGrace), pruneBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune rate counters: %w", err)
		}
		if n < pruneBatch {
			break
		}
	}
	return total, nil
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
