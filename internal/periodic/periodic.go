// Package periodic runs a function at a fixed interval until a context ends.
package periodic

import (
	"context"
	"time"
)

// Every calls fn with the tick's time every `every` until ctx ends; it returns when ctx
// ends. every must be positive.
func Every(ctx context.Context, every time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}
