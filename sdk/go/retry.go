package turnstile

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultDeadline bounds the retries of a call whose context has no deadline.
const DefaultDeadline = 30 * time.Second

// Backoff is an exponential delay with jitter: Initial, times Factor per attempt,
// at most Max, each ±Jitter (a fraction).
type Backoff struct {
	Initial time.Duration
	Factor  float64
	Max     time.Duration
	Jitter  float64
}

// DefaultBackoff is the worker's delay before a failed task's next attempt: 1 s
// doubling to 10 min, ±20%.
var DefaultBackoff = Backoff{Initial: time.Second, Factor: 2, Max: 10 * time.Minute, Jitter: 0.2}

// retryBackoff paces retries through UNAVAILABLE and re-opened streams.
var retryBackoff = Backoff{Initial: 100 * time.Millisecond, Factor: 2, Max: 5 * time.Second, Jitter: 0.2}

// Delay is the wait before try attempt+1 (attempt counts from 1).
func (b Backoff) Delay(attempt int) time.Duration {
	base := float64(b.Initial)
	for i := 1; i < attempt && base < float64(b.Max); i++ {
		base *= b.Factor
	}
	base = min(base, float64(b.Max))
	return time.Duration(max(0, base*(1+(rand.Float64()*2-1)*b.Jitter)))
}

// sleep waits d or until ctx ends (then its error).
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry runs call until it answers something other than UNAVAILABLE, the context
// ends, or (with no deadline in ctx) DefaultDeadline passes.
func retry[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultDeadline)
		defer cancel()
	}
	for attempt := 1; ; attempt++ {
		reply, err := call(ctx)
		if status.Code(err) != codes.Unavailable {
			return reply, fromStatus(err)
		}
		pause := retryBackoff.Delay(attempt)
		if deadline, _ := ctx.Deadline(); time.Now().Add(pause).After(deadline) {
			return reply, fromStatus(err)
		}
		if sleep(ctx, pause) != nil {
			return reply, fromStatus(err)
		}
	}
}

func durationOf(d time.Duration) *durationpb.Duration {
	return durationpb.New(d)
}

// timeOf is a wire timestamp as a time.Time (zero when unset).
func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}
